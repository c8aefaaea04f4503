"""How long grading takes here: seconds per submission per notebook, in full and with
--checks-only, and a class of submissions graded serially against `--dask local:N`; from
those, what a class of 200 learners x 12 notebooks would take on W timing workers.

    python scripts/grading_benchmark.py                          # all 12, class of 12, local:2
    python scripts/grading_benchmark.py --notebooks 08 --class-size 4   # a quick try

Each submission is a copy of the solution (every exercise answered, so every check runs);
each run grades into a fresh folder (nothing reused). Run it on an idle machine: the
numbers are wall-clock seconds of this machine, printed as measured.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from course_utils.grading import grade  # noqa: E402


def timed_grade(subs: Path, out: Path, **kw) -> float:
    t0 = time.perf_counter()
    grade([subs], out=out, solutions=ROOT / "solutions", **kw)
    return time.perf_counter() - t0


def one_submission(tmp: Path, notebook: Path) -> Path:
    folder = tmp / f"one-{notebook.stem}"
    folder.mkdir()
    shutil.copy(notebook, folder / f"learner_{notebook.name}")
    return folder


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--notebooks", default="", help="comma-separated prefixes (default: all)")
    parser.add_argument("--class-notebook", default="08", help="prefix of the class's notebook")
    parser.add_argument("--class-size", type=int, default=12)
    parser.add_argument("--workers", type=int, default=2, help="N of --dask local:N")
    parser.add_argument("--full", action="store_true", help="full workloads (default: --quick)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per cell")
    parser.add_argument("--learners", type=int, default=200, help="for the class estimate")
    parser.add_argument("--gpu-workers", type=int, default=8, help="for the class estimate")
    args = parser.parse_args(argv)
    kw = {"quick": not args.full, "cell_timeout": args.timeout}
    prefixes = [p.strip() for p in args.notebooks.split(",") if p.strip()]
    notebooks = [
        p
        for p in sorted((ROOT / "solutions").glob("*.ipynb"))
        if not prefixes or any(p.name.startswith(x) for x in prefixes)
    ]
    rows = []
    with tempfile.TemporaryDirectory(prefix="grading-benchmark-") as tmp_name:
        tmp = Path(tmp_name)
        print("seconds to grade one submission (solution copy), serial:", flush=True)
        print(f"{'notebook':32s} {'full':>8s} {'--checks-only':>14s} {'saved':>7s}")
        for nb in notebooks:
            subs = one_submission(tmp, nb)
            full = timed_grade(subs, tmp / f"out-full-{nb.stem}", **kw)
            checks = timed_grade(subs, tmp / f"out-checks-{nb.stem}", checks_only=True, **kw)
            rows.append((nb.stem, full, checks))
            print(f"{nb.stem:32s} {full:8.1f} {checks:14.1f} {1 - checks / full:6.0%}", flush=True)
        full_total = sum(r[1] for r in rows)
        checks_total = sum(r[2] for r in rows)
        print(f"{'all of the above':32s} {full_total:8.1f} {checks_total:14.1f}")

        class_nb = next(
            p
            for p in sorted((ROOT / "solutions").glob("*.ipynb"))
            if p.name.startswith(args.class_notebook)
        )
        subs = tmp / "class"
        subs.mkdir()
        for i in range(args.class_size):
            shutil.copy(class_nb, subs / f"learner{i:03d}_{class_nb.name}")
        print(f"\n{args.class_size} submissions of {class_nb.stem}:", flush=True)
        serial = timed_grade(subs, tmp / "out-class-serial", **kw)
        dask = timed_grade(subs, tmp / "out-class-dask", dask=f"local:{args.workers}", **kw)
        efficiency = serial / (dask * args.workers)
        print(
            f"  serial {serial:.1f} s; --dask local:{args.workers} {dask:.1f} s "
            f"({serial / dask:.2f}x; {efficiency:.0%} of {args.workers}x)"
        )

    per_learner = {"full": full_total, "--checks-only": checks_total}
    print(
        f"\n{args.learners} learners x {len(rows)} notebook(s) on {args.gpu_workers} workers, "
        f"from these per-submission times and this parallel efficiency:"
    )
    for label, seconds in per_learner.items():
        hours = seconds * args.learners / (args.gpu_workers * max(efficiency, 1e-9)) / 3600
        print(
            f"  {label:14s} {hours:6.1f} h (serial on one machine: "
            f"{seconds * args.learners / 3600:.1f} h)"
        )
    print(
        "  (this machine's notebook times; a GPU worker runs the GPU parts faster, and full "
        "mode longer: measure with --full on the workers' device class)"
    )
    spread = [r[1] for r in rows]
    if len(spread) > 1:
        print(
            f"  per-notebook full times: median {statistics.median(spread):.1f} s, "
            f"max {max(spread):.1f} s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
