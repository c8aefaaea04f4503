"""The learner's path in a real browser: each learner notebook opened in JupyterLab in headless
Chromium, Run All, and what the learner saw (mode chosen, cells run, errors, check verdicts).

    python scripts/learner_browser_check.py --only 09              # one notebook
    python scripts/learner_browser_check.py --busy --timeout 1800   # all, beside a busy process

The driver is /work/shared/jupyterlab-check (run.sh + check.js; its setup.sh once). Each
notebook is copied, untouched, into a temporary folder beside notebooks/ (so the kernel's cwd
is one folder below the repo root, as for notebooks/) and opened from there: the original is
never written and `..` means the same. The kernel's environment is this one without what a
learner's would not have (the test runner's $PYTEST_VERSION, under which a not-attempted check
raises; $COURSE_QUICK; a forced $MPLBACKEND, which would hide the inline plots), with
COURSE_DATASET=offline. Writes --out/learner-browser.md and .json, and per notebook run.sh's
artifacts plus `executed.ipynb`, the notebook as JupyterLab held it after Run All. Exits 1 if
a notebook showed an error output or did not run every cell, 2 if the tools are missing.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from course_utils import learner_run

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "jupyterlab-check"
RUN_SH = SHARED / "run.sh"
DEFAULT_OUT = ROOT / "report" / "learner-browser"

# What a test runner or the caller's own mode choice would leak into the learner's kernel
# (course_utils.learner_run.NOT_A_LEARNERS, plus a forced matplotlib backend).
NOT_A_LEARNERS = (*learner_run.NOT_A_LEARNERS, "MPLBACKEND")
MODEL_ENV = "LEARNER_BROWSER_MODEL_OUT"
VERDICT = re.compile(r"^(✏️|✅|❌|💥|➖) Check (\S+): ([\w-]+)")

# run.sh keeps the executed notebook only in the page (autosave is off, and summary.json holds
# counts and error names alone). This is loaded into check.js's node with NODE_OPTIONS=--require
# and, just before check.js closes its page (after Run All, also after a timeout), saves the
# notebook model JupyterLab holds, outputs included, to $LEARNER_BROWSER_MODEL_OUT. It only
# reads the page; check.js and run.sh run unchanged.
SAVE_MODEL_JS = r"""
'use strict';
const fs = require('fs');
const { chromium } = require('playwright-core');
const dest = process.env.LEARNER_BROWSER_MODEL_OUT;

async function saveModel(page) {
  try {
    const nb = await page.evaluate(() => {
      const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;
      return w && w.context && w.context.model ? w.context.model.toJSON() : null;
    });
    if (nb) fs.writeFileSync(dest, JSON.stringify(nb, null, 1));
  } catch (e) {
    console.error('[learner-browser] could not save the notebook model:', e.message);
  }
}
function hookPage(page) {
  const close = page.close.bind(page);
  page.close = async (...a) => { await saveModel(page); return close(...a); };
  return page;
}
function hookContext(ctx) {
  const newPage = ctx.newPage.bind(ctx);
  ctx.newPage = async (...a) => hookPage(await newPage(...a));
  return ctx;
}
if (dest) {
  const connect = chromium.connectOverCDP.bind(chromium);
  chromium.connectOverCDP = async (...a) => {
    const browser = await connect(...a);
    browser.contexts().forEach(hookContext);
    const newContext = browser.newContext.bind(browser);
    browser.newContext = async (...b) => hookContext(await newContext(...b));
    return browser;
  };
}
"""


@dataclass
class BrowserRun:
    """One notebook's Run All in JupyterLab, as the learner saw it."""

    notebook: str
    rc: int  # run.sh's: 0 no error output, 1 error outputs, 2 could not run
    summary_line: str  # run.sh's one line ("jupyterlab: 23 code cells, ...")
    mode_line: str = ""  # the setup cell's "quick mode: ..." line, "" if not shown
    code_cells: int = 0
    executed_cells: int = 0
    empty_cells: int = 0  # JupyterLab never executes an empty code cell
    errors: list[str] = field(default_factory=list)  # "cell 14: CheckFailed: ..."
    verdicts: list[dict] = field(default_factory=list)  # {"cell", "check", "status"}
    run_seconds: float | None = None  # Run All alone (check.js, whole seconds)
    total_seconds: float = 0.0  # with the server's and browser's start
    timed_out: bool = False
    failure: str = ""  # why run.sh could not run it
    artifacts: str = ""
    half_solved: bool = False  # every other check's exercises solved (learner_run.half_solved)
    estimate_s: float | None = None  # the estimator's seconds for the mode chosen, and its
    budget_s: float | None = None  # budget (course_utils.selftest.estimate), taken just before

    @property
    def complete(self) -> bool:
        """Every non-empty code cell ran."""
        return self.code_cells > 0 and self.executed_cells >= self.code_cells - self.empty_cells

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.errors and self.complete and not self.timed_out

    def verdict_counts(self) -> dict[str, int]:
        return dict(Counter(v["status"] for v in self.verdicts))

    def to_dict(self) -> dict:
        return {**asdict(self), "complete": self.complete, "ok": self.ok}


def default_venv() -> Path:
    return Path(os.environ.get("VIRTUAL_ENV") or ROOT / ".venv")


def missing_tools(venv: Path | None = None) -> str:
    """Why the browser check cannot run here ("" if it can): checked up front so that a test
    skips, and the script stops, with the reason rather than with run.sh's exit code 2."""
    modules = [
        SHARED / "node_modules",
        Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "jupyterlab-check",
    ]
    if not RUN_SH.is_file():
        return f"{RUN_SH} not found (the shared jupyterlab-check tool)"
    if not (os.environ.get("CHROMIUM") or shutil.which("chromium")):
        return f"chromium not found: run {SHARED / 'setup.sh'} once"
    if not shutil.which("node"):
        return "node not found (apt-get install nodejs npm)"
    if not any((m / "playwright-core").is_dir() for m in modules):
        return f"playwright-core not installed: run {SHARED / 'setup.sh'} once"
    if venv is not None and not (venv / "bin" / "jupyter-lab").exists():
        return f"no jupyter-lab in {venv}/bin (pip install -e '.[lab]', or --venv)"
    return ""


def learner_env(model_out: Path, preload: Path) -> dict[str, str]:
    """The environment run.sh (and so JupyterLab and its kernel) starts with: this one without
    NOT_A_LEARNERS, offline data, and check.js's node made to save the executed notebook."""
    env = {k: v for k, v in os.environ.items() if k not in NOT_A_LEARNERS}
    env["COURSE_DATASET"] = "offline"  # CIFAR-10 cannot be downloaded here
    env[MODEL_ENV] = str(model_out)
    env["NODE_OPTIONS"] = f'{env.get("NODE_OPTIONS", "")} --require "{preload}"'.strip()
    return env


OUTER_LIMIT_RC = 124


def stop(proc: subprocess.Popen) -> None:
    """TERM run.sh (its trap stops what it started, by PID), KILL it if that takes a minute."""
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def run_sh(
    notebook: Path, *, out_dir: Path, venv: Path, timeout: float, env: dict[str, str]
) -> tuple[int, str]:
    """run.sh on `notebook`, its output in out_dir/run.log; returns (rc, its summary line).

    run.sh bounds each of its own steps; this outer limit is a safety net (rc 124). On it
    run.sh gets TERM, which its trap turns into stopping JupyterLab, the kernel and Chromium
    by PID (a KILL would leave them running)."""
    cmd = [str(RUN_SH), str(notebook), "--venv", str(venv), "--out", str(out_dir)]
    cmd += ["--root", str(ROOT), "--timeout", str(int(timeout))]
    log = out_dir / "run.log"
    with open(log, "w") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env, cwd=ROOT)
        try:
            rc = proc.wait(timeout=timeout + 600)  # + server start, page load, screenshots
        except subprocess.TimeoutExpired:
            stop(proc)
            rc = OUTER_LIMIT_RC
        except BaseException:  # Ctrl-C, pytest-timeout: never leave a JupyterLab behind
            stop(proc)
            raise
    lines = log.read_text(errors="replace").splitlines()
    return rc, next((x for x in reversed(lines) if x.startswith("jupyterlab:")), "")


def output_lines(output: dict) -> list[str]:
    """The text lines an output shows: a stream's text, or a display's text/plain."""
    if output.get("output_type") == "stream":
        text = output.get("text", "")
    else:
        text = output.get("data", {}).get("text/plain", "")
    if isinstance(text, list):
        text = "".join(text)
    return [line.strip() for line in text.splitlines()]


def read_model(nb: dict) -> tuple[str, list[dict]]:
    """The setup cell's mode line and the check verdicts shown, one per check and cell (a
    check that stops the run shows its verdict once in its display, again in its error)."""
    mode_line, verdicts, seen = "", [], set()
    for index, cell in enumerate(nb.get("cells", []), start=1):
        for output in cell.get("outputs", []):
            for line in output_lines(output):
                if not mode_line and line.startswith("quick mode:"):
                    mode_line = line
                match = VERDICT.match(line)
                if match and (index, match[2]) not in seen:
                    seen.add((index, match[2]))
                    verdicts.append({"cell": index, "check": match[2], "status": match[3]})
    return mode_line, verdicts


def collect(notebook: Path, rc: int, line: str, out_dir: Path, seconds: float) -> BrowserRun:
    """A BrowserRun from run.sh's summary.json and the saved notebook model."""
    run = BrowserRun(notebook.stem, rc, line, total_seconds=round(seconds, 1))
    run.artifacts = str(out_dir)
    summary_file, model_file = out_dir / "summary.json", out_dir / "executed.ipynb"
    summary = json.loads(summary_file.read_text()) if summary_file.exists() else {}
    run.failure = summary.get("failure", "" if summary else "no summary.json (see run.log)")
    if rc == OUTER_LIMIT_RC:
        run.failure = f"stopped after {seconds:.0f} s, run.sh's own limits did not end it"
    run.code_cells = summary.get("codeCells", 0)
    run.executed_cells = summary.get("executedCells", 0)
    run.empty_cells = summary.get("emptyCodeCells", 0)
    run.run_seconds = summary.get("runSeconds")
    run.timed_out = bool(summary.get("timedOut"))
    run.errors = [
        f"cell {e['cell']}: {e['ename']}: {e['evalue'].splitlines()[0] if e['evalue'] else ''}"
        for e in summary.get("errors", [])
    ]
    if model_file.exists():
        run.mode_line, run.verdicts = read_model(json.loads(model_file.read_text()))
    return run


def check_notebook(
    notebook: Path,
    *,
    out_dir: Path,
    venv: Path | None = None,
    timeout: float = 1200,
    half_solved: bool = False,
) -> BrowserRun:
    """Open an untouched copy of `notebook` (or, `half_solved`, one with every other check's
    exercises solved) in JupyterLab in headless Chromium, Run All, and say what the learner
    saw. The copy sits in a temporary folder beside notebooks/ (removed afterwards): run.sh
    serves the repo root and starts the kernel in the notebook's folder."""
    venv = venv or default_venv()
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "executed.ipynb").unlink(missing_ok=True)  # never report an older run's
    folder = Path(tempfile.mkdtemp(prefix="_learner_browser_", dir=ROOT))
    preload = Path(tempfile.mkdtemp(prefix="learner-browser-")) / "save_model.js"
    try:
        copy = folder / notebook.name
        if half_solved:
            write_half_solved(notebook, copy)
        else:
            shutil.copyfile(notebook, copy)
        preload.write_text(SAVE_MODEL_JS)
        env = learner_env(out_dir / "executed.ipynb", preload)
        estimates = {q: estimate_for(notebook, q) for q in (True, False)}
        t0 = time.monotonic()
        rc, line = run_sh(copy, out_dir=out_dir, venv=venv, timeout=timeout, env=env)
        run = collect(notebook, rc, line, out_dir, time.monotonic() - t0)
        run.half_solved = half_solved
        run.estimate_s, run.budget_s = estimates[": on" in run.mode_line]
        return run
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        shutil.rmtree(preload.parent, ignore_errors=True)


def write_half_solved(notebook: Path, dest: Path) -> None:
    """The learner copy with every other check's exercises solved, from solutions/."""
    import nbformat

    from course_utils.learner_run import half_solved

    solution = nbformat.read(str(ROOT / "solutions" / notebook.name), as_version=4)
    nbformat.write(half_solved(solution, notebook.name)[0], str(dest))


def estimate_for(notebook: Path, quick: bool) -> tuple[float | None, float | None]:
    """(estimate, budget) in seconds of `notebook` in one mode on this machine, now."""
    from course_utils import device
    from course_utils.selftest.estimate import estimate, host_probe_s

    # probed again under the load of this moment, as the notebook's setup cell probes
    host_probe_s.cache_clear()
    device._probe_cpu_flops.cache_clear()
    est = estimate(notebook.stem.split("_")[0], device.env_info(), quick=quick)
    return (est["estimate_s"], est["budget_s"]) if est else (None, None)


def selected(only: str) -> list[Path]:
    """notebooks/*.ipynb, or those whose prefix ("02b") or two digits ("02": 02 and 02b) are
    in the comma-separated `only`."""
    prefixes = {p.strip() for p in only.split(",") if p.strip()}
    paths = sorted((ROOT / "notebooks").glob("*.ipynb"))
    return [
        p
        for p in paths
        if not prefixes or p.stem[:2] in prefixes or p.stem.split("_")[0] in prefixes
    ]


def table_row(run: BrowserRun) -> str:
    counts = ", ".join(f"{s} {n}" for s, n in sorted(run.verdict_counts().items())) or "none"
    executed = f"{run.executed_cells}/{run.code_cells}"
    if run.empty_cells:
        executed += f" ({run.empty_cells} empty)"
    errors = str(len(run.errors)) + "".join(f"<br>{e[:160]}" for e in run.errors)
    if run.failure:
        errors += f"<br>could not run: {run.failure}"
    elif run.timed_out:
        errors += "<br>timed out"
    seconds = "-" if run.run_seconds is None else f"{run.run_seconds:g}"
    mode = run.mode_line.replace("|", "\\|") or "(no mode line)"
    est = "-" if run.estimate_s is None else f"{run.estimate_s:.0f} / {run.budget_s:.0f}"
    copy = "half solved" if run.half_solved else "untouched"
    return (
        f"| {run.notebook} | {copy} | {mode} | {est} | {seconds} | {executed} | {errors} "
        f"| {counts} |"
    )


def table(runs: list[BrowserRun]) -> str:
    head = [
        "| notebook | copy | mode chosen | estimate / budget (s) | Run All (s) | cells executed "
        "| errors | check verdicts |",
        "|---|---|---|---|---|---|---|---|",
    ]
    return "\n".join(head + [table_row(r) for r in runs])


def provenance(args: argparse.Namespace) -> dict:
    git = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True)
    dirty = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True)
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": "python scripts/learner_browser_check.py " + " ".join(sys.argv[1:]),
        "commit": git.stdout.decode().strip() + ("+changes" if dirty.stdout.strip() else ""),
        "cpus": os.cpu_count(),
        "busy_process_beside": args.busy,
        "timeout_s": args.timeout,
        "venv": str(args.venv),
    }


def write_report(runs: list[BrowserRun], out: Path, head: dict) -> Path:
    """--out/learner-browser.md (provenance and the table) and .json (every field) beside it."""
    text = "# The learner's path in JupyterLab (headless Chromium)\n\n"
    text += "\n".join(f"- {k}: {v}" for k, v in head.items()) + "\n\n" + table(runs) + "\n"
    md = out / "learner-browser.md"
    md.write_text(text)
    rows = [r.to_dict() for r in runs]
    md.with_suffix(".json").write_text(json.dumps({**head, "rows": rows}, indent=1))
    return md


def check_all(notebooks: list[Path], args: argparse.Namespace) -> list[BrowserRun]:
    runs = []
    for path in notebooks:
        print(f"{path.stem}: Run All in JupyterLab ...", flush=True)
        run = check_notebook(
            path,
            out_dir=args.out / (path.stem + ("-half-solved" if args.half_solved else "")),
            venv=args.venv,
            timeout=args.timeout,
            half_solved=args.half_solved,
        )
        print(f"  {run.summary_line or run.failure} [{run.total_seconds:.0f} s in all]")
        print(f"  {run.mode_line or '(no mode line)'}; verdicts {run.verdict_counts()}", flush=True)
        runs.append(run)
    return runs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="notebook prefixes, e.g. 00,02")
    parser.add_argument("--busy", action="store_true", help="one busy process beside the run")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--timeout", type=float, default=1200, help="Run All seconds, each")
    parser.add_argument("--venv", type=Path, default=default_venv())
    parser.add_argument(
        "--half-solved", action="store_true", help="every other check's exercises solved"
    )
    args = parser.parse_args()
    reason = missing_tools(args.venv)
    if reason:
        print(f"cannot run: {reason}", file=sys.stderr)
        return 2
    notebooks = selected(args.only)
    if not notebooks:
        print(f"no notebook matches --only {args.only}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    head = provenance(args)
    if args.busy:
        sys.path.insert(0, str(ROOT / "scripts"))
        from busy_benchmark import spinning

        with spinning(1):
            runs = check_all(notebooks, args)
    else:
        runs = check_all(notebooks, args)
    md = write_report(runs, args.out, head)
    print(table(runs))
    print(f"wrote {md} and {md.with_suffix('.json').name}")
    return 0 if all(r.ok for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
