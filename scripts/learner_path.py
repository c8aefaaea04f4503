"""The learner's path, measured: each learner copy run as a learner runs it, against the estimate.

    python scripts/learner_path.py [--mode auto|quick|full] [--only 02,09] [--deadline 300]
                                   [--busy] [--out docs/results/learner-path-cpu.md]

For each notebook: the untouched learner copy, no parameters (`--mode auto`: the auto mode
decides, as in JupyterLab; `quick`/`full` force it with COURSE_QUICK), Run All in a kernel
without the test runner's variables (course_utils.learner_run). Writes a table of the mode
chosen, the estimator's seconds for that mode (course_utils.selftest.estimate), the measured
seconds, their ratio and the load average, with the provenance on top, as .md and .json.
With --deadline a run stops there and its time is a lower bound (">"). With --busy one busy
process (scripts/busy_benchmark.py's) runs beside every notebook, as on a laptop in use. With
--merge the rows join those already in --out's JSON (a row of the same notebook and mode is
replaced), so quick and full runs made one after the other share a file; each row keeps its
own date, command and load.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))


INTRO = (
    "Each learner copy run top to bottom with no parameters and no test runner in the kernel "
    "(course_utils.learner_run), one notebook at a time. The model column is the run-time "
    "estimator before `CPU_RATIO` (course_utils/selftest/estimate.py), which is read from "
    "measured / model here; a run stopped at its deadline ('>') gives a lower bound, and the "
    "ratio is then max(1, bound / model)."
)


def commit() -> str:
    out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True)
    dirty = subprocess.run(["git", "status", "--porcelain"], cwd=ROOT, capture_output=True)
    return out.stdout.decode().strip() + ("+changes" if dirty.stdout.strip() else "")


def measure(path: Path, mode: str, deadline: float | None, busy: bool) -> dict:
    from course_utils import learner_run
    from course_utils.device import env_info
    from course_utils.selftest.estimate import estimate

    env = {} if mode == "auto" else {"COURSE_QUICK": "1" if mode == "quick" else "0"}
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="learner-path-") as tmp:
        run = learner_run.run_file(path, Path(tmp), deadline_s=deadline, **env)
    quick = run.quick if run.quick is not None else mode == "quick"
    est = estimate(path.stem.split("_")[0], env_info(), quick=quick)  # "02b" for 02b_...
    return {
        "notebook": path.stem,
        "mode": "quick" if quick else "full",
        "mode_line": run.mode_line,
        "estimate_s": est["estimate_s"] if est else None,
        "model_s": est["estimate_s"] / est["cpu_ratio"] if est else None,  # before CPU_RATIO
        "budget_s": est["budget_s"] if est else None,
        "measured_s": run.seconds,
        "finished": run.finished,
        "errors": [f"cell {c.index}: {c.error}" for c in run.errors],
        "slowest_silence_s": max(_silence(c) for c in run.cells),
        "silent_cells": {c.index: round(_silence(c), 1) for c in run.cells if _silence(c) > 5},
        "load": [round(load_before, 1), round(os.getloadavg()[0], 1)],
        "busy_process_beside": busy,
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": "python scripts/learner_path.py " + " ".join(sys.argv[1:]),
    }


def _silence(cell) -> float:
    """Seconds before the cell's first output (all of its run if it printed nothing)."""
    return cell.first_output_s if cell.first_output_s is not None else cell.seconds


def table(rows: list[dict]) -> str:
    """One line per run. `model`: the estimator before CPU_RATIO; `estimate`: with it (the
    same where the run predates the ratio); measured / model is what CPU_RATIO is read from."""
    lines = [
        "| notebook | mode | model (s) | estimate (s) | measured (s) | measured / model "
        "| budget (s) | errors | longest silence (s) | busy process beside | load (before / after) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        bound = "" if r["finished"] else ">"
        model = r.get("model_s") or r["estimate_s"]
        lines.append(
            f"| {r['notebook']} | {r['mode']} | {model:.0f} | {r['estimate_s']:.0f} "
            f"| {bound}{r['measured_s']:.0f} | {bound}{r['measured_s'] / model:.2f} "
            f"| {r['budget_s']:.0f} | {len(r['errors'])} | {r['slowest_silence_s']:.1f} "
            f"| {'yes' if r.get('busy_process_beside') else 'no'} "
            f"| {r['load'][0]} / {r['load'][1]} |"
        )
    return "\n".join(lines)


def provenance() -> dict:
    from course_utils.device import env_info

    info = env_info()
    return {
        "commit": commit(),
        "device": f"{info['device_name']} ({info['device_class']}), {os.cpu_count()} CPUs",
        "torch": info["torch"],
        "python": platform.python_version(),
        "commands": "each row's `command` and `date` in the JSON beside this file",
    }


def merged(out: Path, rows: list[dict]) -> list[dict]:
    """The rows already in `out`'s JSON, with those of the same notebook and mode replaced."""
    path = out.with_suffix(".json")
    old = json.loads(path.read_text())["rows"] if path.exists() else []
    new = {(r["notebook"], r["mode"]) for r in rows}
    kept = [r for r in old if (r["notebook"], r["mode"]) not in new]
    return sorted(kept + rows, key=lambda r: (r["notebook"], r["mode"]))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mode", choices=("auto", "quick", "full"), default="auto")
    parser.add_argument("--only", default="", help="notebook prefixes, e.g. 02,09")
    parser.add_argument("--deadline", type=float, default=None, help="seconds per notebook")
    parser.add_argument("--busy", action="store_true", help="one busy process beside each run")
    parser.add_argument("--out", type=Path, default=ROOT / "docs/results/learner-path-cpu.md")
    parser.add_argument("--merge", action="store_true", help="add to the rows in --out")
    parser.add_argument("--note", action="append", default=[], help="a line for the notes")
    args = parser.parse_args()
    only = {p.strip() for p in args.only.split(",") if p.strip()}
    notebooks = [
        p
        for p in sorted((ROOT / "notebooks").glob("*.ipynb"))
        if not only or p.stem[:2] in only or p.stem.split("_")[0] in only  # "02": 02 and 02b
    ]
    rows = []
    for path in notebooks:
        if args.busy:
            from busy_benchmark import spinning

            with spinning(1):
                rows.append(measure(path, args.mode, args.deadline, busy=True))
        else:
            rows.append(measure(path, args.mode, args.deadline, busy=False))
        print(table(rows[-1:]).splitlines()[-1], flush=True)
    notes = args.note
    if args.merge:
        rows = merged(args.out, rows)
        notes = old_notes(args.out) + notes
    head = {**provenance(), "notes": notes}
    write(args.out, head, rows)
    print(f"wrote {args.out}")
    return 0 if all(not r["errors"] for r in rows) else 1


def old_notes(out: Path) -> list[str]:
    path = out.with_suffix(".json")
    return json.loads(path.read_text()).get("notes", []) if path.exists() else []


def write(out: Path, head: dict, rows: list[dict]) -> None:
    """The table as .md (the intro, provenance, notes) and every field as .json beside it."""
    facts = "\n".join(f"- {k}: {v}" for k, v in head.items() if k != "notes")
    notes = "".join(f"\n- {n}" for n in head.get("notes", []))
    text = f"# The learner's path, measured\n\n{INTRO}\n\n{facts}\n"
    if notes:
        text += f"\nNotes:{notes}\n"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n" + table(rows) + "\n")
    out.with_suffix(".json").write_text(json.dumps({**head, "rows": rows}, indent=1))


if __name__ == "__main__":
    sys.exit(main())
