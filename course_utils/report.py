"""`course report`: run every solution notebook and collect what it measured.

Writes `OUT/results.csv` (one row per check: status and measured value on this machine),
`OUT/report.md` (the same as a table, with provenance and run times), `OUT/plots/` (every
figure the notebooks drew) and `OUT/executed/` (the notebooks with their outputs), so the
course's claims can be re-measured on any device.
"""

from __future__ import annotations

import base64
import csv
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

import nbformat
from tqdm.auto import tqdm

from .authoring import read
from .errors import UsageError
from .grading import Row, execute_isolated, read_results, restore_checks
from .session import env


def report(
    solutions: Path = Path("solutions"),
    out: Path = Path("report"),
    *,
    quick: bool = False,
    timeout: float = 900,
) -> str:
    paths = sorted(Path(solutions).glob("*.ipynb"))
    if not paths:
        raise UsageError(f"no solution notebooks in {solutions}")
    out.mkdir(parents=True, exist_ok=True)
    (out / "plots").mkdir(exist_ok=True)
    info = env(verbose=False)
    rows, seconds = [], {}
    for path in tqdm(paths, desc="report", unit="notebook"):
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
        seconds[lesson] = time.perf_counter() - t0
        if executed is not None:
            (out / "executed").mkdir(exist_ok=True)
            nbformat.write(executed, str(out / "executed" / path.name))
        rows += [
            Row(path.name, lesson, **r)
            for r in read_results(executed or prepared, sol, lesson, status, timeout)
        ]
        for i, cell in enumerate((executed or prepared).cells):
            for j, output in enumerate(cell.get("outputs", [])):
                png = output.get("data", {}).get("image/png")
                if png:
                    (out / "plots" / f"{lesson}-cell{i:02d}-{j}.png").write_bytes(
                        base64.b64decode(png)
                    )
    with open(out / "results.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(Row.columns())
        for r in rows:
            d = asdict(r)
            writer.writerow(["" if d[c] is None else d[c] for c in Row.columns()])
    lines = [
        "# Course report",
        "",
        f"{info['device_name']} (`{info['device_class']}`), torch {info['torch']}, "
        f"data: {info['dataset']}, quick mode: {'on' if quick else 'off'}.",
        "",
        "| notebook | check | status | measured | expected | message |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        fmt = lambda v: "" if v is None else f"{v:.4g}"  # noqa: E731
        lines.append(
            f"| {r.notebook} | {r.check} | {r.status} | {fmt(r.value)} | {fmt(r.threshold)} | {r.message.replace('|', '/')} |"
        )
    lines += ["", "| notebook | run time |", "|---|---|"] + [
        f"| {k} | {v:.0f} s |" for k, v in seconds.items()
    ]
    (out / "report.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    passed = sum(r.status in ("passed", "not-applicable") for r in rows)
    return f"{passed}/{len(rows)} checks passed or not applicable on {info['device_class']}; see {out / 'report.md'} and {out / 'plots'}/"
