"""`course report`: run every solution notebook and show what each technique bought here.

Writes into OUT: `results.json` (every check with its parts, every headline effect with its
raw samples, the run of each notebook, and the provenance), `report.md` and a self-contained
`report.html` with the same content (what "effect" means; one row per technique: its workload,
baseline, improved, effect with its n and spread, the figure a check of the same notebook
measured, what this device class expects, status, run time; the checks table),
`summary.png` (the effect per technique, whiskers only where n >= 2), `plots/` (every figure
the notebooks drew) and `executed/`. `--only` re-runs some notebooks and merges them into the
results already in OUT. `--reference` also copies the report to
`docs/results/<device-class>-<device-name>.{md,json,png}`, the committed reference results.
How an effect is set beside its check lives in course_utils.headlines.
"""

from __future__ import annotations

import base64
import datetime
import json
import re
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .authoring import read
from .effects import fmt_value
from .errors import UsageError
from .headlines import COLUMNS, MEANING, Headline, headlines, note, technique_rows
from .protocol import EFFECT_MIME, NOT_APPLICABLE, PASSED

OK_STATUSES = (PASSED, NOT_APPLICABLE)


@dataclass
class NotebookRun:
    """One solution notebook's run: how it ended, its checks, its effects, its figures."""

    notebook: str
    outcome: str  # completed, crashed, kernel-died, notebook-timeout
    detail: str
    seconds: float
    checks: list[dict] = field(default_factory=list)
    effects: list[dict] = field(default_factory=list)
    plots: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.outcome == "completed" and all(c["status"] in OK_STATUSES for c in self.checks)


@dataclass
class Report:
    env: dict
    quick: bool
    date: str
    command: str
    runs: dict[str, NotebookRun]

    @property
    def ok(self) -> bool:
        return all(run.ok for run in self.runs.values())

    def to_dict(self) -> dict:
        return {**asdict(self), "ok": self.ok}

    @classmethod
    def from_dict(cls, data: dict) -> Report:
        runs = {k: NotebookRun(**v) for k, v in data.get("runs", {}).items()}
        return cls(data["env"], data["quick"], data["date"], data["command"], runs)

    def summary(self) -> str:
        checks = [c for run in self.runs.values() for c in run.checks]
        good = sum(c["status"] in OK_STATUSES for c in checks)
        broken = [name for name, run in self.runs.items() if run.outcome != "completed"]
        tail = f"; notebooks that did not complete: {', '.join(broken)}" if broken else ""
        return (
            f"{good}/{len(checks)} checks passed or not applicable on "
            f"{self.env.get('device_class')} in {len(self.runs)} notebook(s){tail}"
        )


def run_notebook(path: Path, out: Path, *, quick: bool, timeout: float) -> NotebookRun:
    """Execute one solution notebook as the grader would, and read what it measured."""
    from .grading.isolated import execute_isolated
    from .grading.restore import restore_checks
    from .grading.results import read_results

    lesson, sol = path.stem, read(path)
    prepared, _ = restore_checks(sol, sol, lesson)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="course-report-") as tmp:
        executed, status = execute_isolated(
            prepared,
            Path(tmp),
            cell_timeout=timeout,
            notebook_timeout=max(3600.0, 4 * timeout),
            quick=quick,
        )
    seconds = time.perf_counter() - t0
    nb = executed or prepared
    if executed is not None:
        (out / "executed").mkdir(parents=True, exist_ok=True)
        import nbformat

        nbformat.write(executed, str(out / "executed" / path.name))
    checks = read_results(executed, sol, lesson, status, timeout)  # parts kept: headlines read them
    run = NotebookRun(lesson, status["outcome"], status.get("detail", ""), seconds, checks)
    for old in (out / "plots").glob(f"{lesson}-*.png"):
        old.unlink()
    for i, cell in enumerate(nb.cells):
        for j, output in enumerate(cell.get("outputs", [])):
            data = output.get("data", {})
            if EFFECT_MIME in data:
                run.effects.append(data[EFFECT_MIME])
            if "image/png" in data:
                name = f"{lesson}-cell{i:02d}-{j}.png"
                (out / "plots").mkdir(parents=True, exist_ok=True)
                (out / "plots" / name).write_bytes(base64.b64decode(data["image/png"]))
                run.plots.append(name)
    return run


def selected(stem: str, only: str) -> bool:
    """Whether `--only` name `only` selects notebook `stem`: a start of its name ("04",
    "04_mixed"), unless a letter follows it there, which names a sibling lesson ("02" selects
    02_batch_size, not 02b_large_batch; "02b" selects 02b_large_batch)."""
    after = stem[len(only) : len(only) + 1]
    return stem.startswith(only) and not after.isalpha()


def report(
    solutions: Path = Path("solutions"),
    out: Path = Path("report"),
    *,
    quick: bool = False,
    timeout: float = 900,
    only: list[str] | None = None,
    reference: Path | None = None,
) -> Report:
    """Run the solution notebooks (all, or those `only` names: see `selected`)."""
    from .progress import tqdm
    from .session import env

    paths = sorted(Path(solutions).glob("*.ipynb"))
    if only:
        paths = [p for p in paths if any(selected(p.stem, o) for o in only)]
    if not paths:
        raise UsageError(
            f"no solution notebooks in {solutions}" + (f" match {only}" if only else "")
        )
    out.mkdir(parents=True, exist_ok=True)
    previous = out / "results.json"
    runs: dict[str, NotebookRun] = {}
    if only and previous.exists():
        runs = Report.from_dict(json.loads(previous.read_text(encoding="utf-8"))).runs
    result = Report(
        env(verbose=False),
        quick,
        datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "course report"
        + (" --quick" if quick else "")
        + (f" --only {','.join(only)}" if only else ""),
        runs,
    )
    bar = tqdm(paths, desc="report", unit="notebook")
    for path in bar:
        bar.set_postfix_str(path.stem)
        run = run_notebook(path, out, quick=quick, timeout=timeout)
        result.runs[run.notebook] = run
        good = sum(c["status"] in OK_STATUSES for c in run.checks)
        how = "" if run.outcome == "completed" else f", {run.outcome}: {run.detail}"
        bar.write(
            f"{run.notebook}: {good}/{len(run.checks)} checks ok, "
            f"{effect_count(run)}, {run.seconds:.0f} s{how}",
            file=sys.stderr,
        )
    result.runs = dict(sorted(result.runs.items()))
    write(result, out)
    if reference is not None:
        publish(result, out, reference)
    return result


def effect_count(run: NotebookRun) -> str:
    """Says "no headline effect" where there is none: "0 effect(s)" reads as a failure."""
    n = len(run.effects)
    return "no headline effect" if n == 0 else f"{n} headline effect" + ("s" if n > 1 else "")


# --- writing -------------------------------------------------------------------------------

CHECK_COLUMNS = ("notebook", "check", "status", "measured", "expected", "message")


def check_rows(result: Report) -> list[dict]:
    """One row per check (and one per notebook that did not complete), for both pages."""
    rows = []
    for name, run in result.runs.items():
        if run.outcome != "completed":
            row = {"notebook": name, "check": "(notebook)", "status": run.outcome}
            rows.append({**row, "measured": "", "expected": "", "message": run.detail})
        for c in run.checks:
            rows.append(
                {
                    "notebook": name,
                    "check": c["check"],
                    "status": c["status"],
                    "measured": fmt_value(c.get("value")),
                    "expected": fmt_value(c.get("threshold")),
                    "message": str(c.get("message", "")),
                }
            )
    return rows


def all_headlines(result: Report) -> list[Headline]:
    """Every notebook's headline effects, each with its workload and related check figure."""
    return [
        h for name, run in result.runs.items() for h in headlines(name, run.effects, run.checks)
    ]


NOTES_TITLE = "What each effect timed, and what its notebook's check measured:"


def _md_table(columns: tuple[str, ...], rows: list[dict]) -> list[str]:
    def cell(value: object) -> str:
        return str(value).replace("|", "/").replace("\n", " ")

    head = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    return head + ["| " + " | ".join(cell(r[c]) for c in columns) + " |" for r in rows]


def _html_table(columns: tuple[str, ...], rows: list[dict]) -> str:
    import html as h

    head = "".join(f"<th>{h.escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{h.escape(str(r[c]))}</td>" for c in columns) + "</tr>" for r in rows
    )
    return f"<table><tr>{head}</tr>{body}</table>"


def markdown(result: Report, figure: str | None) -> str:
    e = result.env
    lines = [
        "# Course report",
        "",
        f"- device: {e.get('device_name')} (`{e.get('device')}`), class `{e.get('device_class')}`",
        f"- torch {e.get('torch')}, CUDA {e.get('cuda') or 'none'}, Python {e.get('python')}, "
        f"{e.get('threads')} threads of {e.get('cpu_count')} CPUs",
        f"- data: {e.get('dataset')}; quick mode: {'on' if result.quick else 'off'}",
        f"- {result.date}, `{result.command}`; {result.summary()}",
        "",
        MEANING,
        "",
        *_md_table(COLUMNS, technique_rows(result.runs)),
    ]
    notes = [note(h) for h in all_headlines(result)]
    if notes:
        lines += ["", NOTES_TITLE, ""] + [f"- {n}" for n in notes]
    if figure:
        lines += ["", f"![effect per technique]({figure})"]
    lines += ["", "## Checks", "", *_md_table(CHECK_COLUMNS, check_rows(result))]
    return "\n".join(lines) + "\n"


def summary_figure(result: Report, path: Path) -> bool:
    """Bars of the effect per technique: whiskers at the IQR where n >= 2, n on every bar."""
    found = all_headlines(result)
    if not found:
        return False
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    from .plots import effect_bars

    fig = effect_bars(
        [
            f"{h.notebook.split('_')[0]} {h.effect['technique']}\n({h.effect['metric']})"
            for h in found
        ],
        [h.ratio for h in found],
        [h.iqr for h in found],
        [h.n for h in found],
        [h.shown for h in found],
        title=f"Effect per technique on {result.env.get('device_class')}",
    )
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def html(result: Report, out: Path, figure: str | None) -> str:
    """The same content as report.md, self-contained: every image inlined."""
    import html as h

    def img(path: Path) -> str:
        if not path.exists():  # a figure of an earlier run that was cleaned away
            return f"<p><i>missing figure {h.escape(path.name)}</i></p>"
        data = base64.b64encode(path.read_bytes()).decode()
        return f'<img src="data:image/png;base64,{data}" style="max-width:100%">'

    notes = "".join(f"<li>{h.escape(note(x))}</li>" for x in all_headlines(result))
    parts = [
        "<!doctype html><meta charset='utf-8'><title>Course report</title>",
        "<style>body{font-family:sans-serif;max-width:1100px;margin:auto}"
        "td,th{border:1px solid #ccc;padding:3px 6px}table{border-collapse:collapse}</style>",
        f"<h1>Course report</h1><p>{h.escape(result.env.get('device_name', ''))} "
        f"(<code>{h.escape(str(result.env.get('device_class')))}</code>), torch "
        f"{h.escape(str(result.env.get('torch')))}, {h.escape(result.date)}, "
        f"<code>{h.escape(result.command)}</code>. {h.escape(result.summary())}</p>",
        f"<p>{h.escape(MEANING)}</p>",
        _html_table(COLUMNS, technique_rows(result.runs)),
    ]
    if notes:
        parts.append(f"<p>{NOTES_TITLE}</p><ul>{notes}</ul>")
    if figure:
        parts.append(img(out / figure))
    parts += ["<h2>Checks</h2>", _html_table(CHECK_COLUMNS, check_rows(result))]
    for name, run in result.runs.items():
        if run.plots:
            parts.append(f"<h2>{h.escape(name)}</h2>")
            parts += [img(out / "plots" / p) for p in run.plots]
    return "\n".join(parts)


def write(result: Report, out: Path) -> None:
    (out / "results.json").write_text(json.dumps(result.to_dict(), indent=1), encoding="utf-8")
    figure = "summary.png" if summary_figure(result, out / "summary.png") else None
    (out / "report.md").write_text(markdown(result, figure), encoding="utf-8")
    (out / "report.html").write_text(html(result, out, figure), encoding="utf-8")


def reference_name(env: dict) -> str:
    name = re.sub(r"[^a-z0-9]+", "-", str(env.get("device_name", "unknown")).lower()).strip("-")
    return f"{env.get('device_class')}-{name or 'unknown'}"


def publish(result: Report, out: Path, folder: Path) -> Path:
    """Copy the report to `folder/<class>-<device>.{md,json,png}`: the committed reference."""
    folder.mkdir(parents=True, exist_ok=True)
    stem = reference_name(result.env)
    figure = f"{stem}.png" if (out / "summary.png").exists() else None
    if figure:
        shutil.copy(out / "summary.png", folder / figure)
    (folder / f"{stem}.md").write_text(markdown(result, figure), encoding="utf-8")
    (folder / f"{stem}.json").write_text(json.dumps(result.to_dict(), indent=1), encoding="utf-8")
    return folder / f"{stem}.md"
