"""What isolating and judging costs: one class of 12 submissions graded by this tree's grader
and by an earlier revision's, alternately, in one run.

    python scripts/grading_overhead.py --against 1c62bc0            # the grader before v3
    python scripts/grading_overhead.py --against 1c62bc0 --rounds 3 --out docs/results/x.md

The class (lessons 00 and 10, quick mode): two solutions, two blank copies, two half-solved
copies, a notebook whose kernel dies, an unreadable file, two solutions whose names collide
once flattened (x/00_a.ipynb, x__00_a.ipynb), and a second half-solved 00. The earlier grader
runs from a git worktree of --against (its own course_utils first on PYTHONPATH, this venv's
packages), on the same submissions and the same solutions. Each round grades the class with
one grader, then the other (the order alternates), each into a fresh folder: nothing is
reused. The ratio is the median of the rounds' ratios (new / old). Run it on an idle machine.
"""

from __future__ import annotations

import argparse
import copy
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from course_utils.authoring import code, has_solution, read, write  # noqa: E402

LESSONS = ("00_measuring", "10_habits")


def half_solved(lesson: str):
    """The learner copy with every other exercise answered from the solution."""
    solution, learner = (
        read(ROOT / "solutions" / f"{lesson}.ipynb"),
        read(ROOT / "notebooks" / f"{lesson}.ipynb"),
    )
    nb, answered = copy.deepcopy(learner), 0
    for mine, theirs in zip(nb.cells, solution.cells, strict=True):
        if has_solution(theirs):
            if answered % 2 == 0:
                mine.source = theirs.source
            answered += 1
    return nb


def make_class(folder: Path) -> int:
    """The 12 submissions; returns how many."""
    sol = {x: read(ROOT / "solutions" / f"{x}.ipynb") for x in LESSONS}
    blank = {x: read(ROOT / "notebooks" / f"{x}.ipynb") for x in LESSONS}
    for who, lesson in (("alice", LESSONS[0]), ("bob", LESSONS[1])):
        write(sol[lesson], folder / who / f"{lesson}.ipynb")
    for who, lesson in (("carol", LESSONS[0]), ("dan", LESSONS[1])):
        write(blank[lesson], folder / who / f"{lesson}.ipynb")
    for who, lesson in (("erin", LESSONS[0]), ("frank", LESSONS[1]), ("gus", LESSONS[0])):
        write(half_solved(lesson), folder / who / f"{lesson}.ipynb")
    crash = copy.deepcopy(sol[LESSONS[0]])
    crash.cells.insert(8, code("import os\n\nos._exit(1)  # the kernel dies here"))
    write(crash, folder / "hank" / f"{LESSONS[0]}.ipynb")
    (folder / "ivy").mkdir()
    (folder / "ivy" / f"{LESSONS[0]}.ipynb").write_text("{ not json", encoding="utf-8")
    (folder / "x").mkdir()
    write(sol[LESSONS[0]], folder / "x" / "00_a.ipynb")
    write(sol[LESSONS[0]], folder / "x__00_a.ipynb")
    return len(list(folder.rglob("*.ipynb")))


def grade_with(source: Path, subs: Path, out: Path) -> float:
    """Seconds for `course grade --quick` with the course_utils of `source`."""
    env = {**os.environ, "PYTHONPATH": str(source)}
    cmd = [sys.executable, "-m", "course_utils", "grade", str(subs), "--out", str(out)]
    cmd += ["--solutions", str(ROOT / "solutions"), "--quick"]
    start = time.perf_counter()
    done = subprocess.run(cmd, env=env, cwd=source, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode not in (0, 1):
        raise SystemExit(f"{source}: course grade failed:\n{done.stderr[-3000:]}")
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", required=True, help="the git revision to compare with")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, help="also write the table here (Markdown)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="grading-overhead-") as tmp_name:
        tmp = Path(tmp_name)
        old = tmp / "old"
        subprocess.run(
            ["git", "worktree", "add", "--detach", str(old), args.against],
            cwd=ROOT,
            check=True,
            capture_output=True,
        )
        try:
            count = make_class(tmp / "class")
            rows = []
            for r in range(args.rounds):
                order = [("old", old), ("new", ROOT)]
                if r % 2:
                    order.reverse()
                seconds = {}
                for label, source in order:
                    seconds[label] = grade_with(source, tmp / "class", tmp / f"out-{label}-{r}")
                    print(f"round {r + 1}: {label} {seconds[label]:.1f} s", flush=True)
                rows.append(seconds)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=ROOT)
            shutil.rmtree(old, ignore_errors=True)
    ratios = [r["new"] / r["old"] for r in rows]
    lines = [
        f"# Grading overhead: this tree against {args.against}",
        "",
        f"A class of {count} submissions (lessons 00 and 10, quick mode), graded serially by "
        f"each grader in turn, {args.rounds} rounds, on {platform.node()} "
        f"({os.cpu_count()} CPUs), `python scripts/grading_overhead.py --against "
        f"{args.against} --rounds {args.rounds}`, {time.strftime('%Y-%m-%d')}.",
        "",
        "| round | earlier grader (s) | this grader (s) | ratio |",
        "|---|---|---|---|",
        *[
            f"| {i + 1} | {r['old']:.1f} | {r['new']:.1f} | {r['new'] / r['old']:.2f} |"
            for i, r in enumerate(rows)
        ],
        "",
        f"Median ratio: **{statistics.median(ratios):.2f}x** (this grader's time over the "
        "earlier one's).",
    ]
    print("\n".join(lines))
    if args.out:
        args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
