"""`course grade`: grade learners' notebooks from one machine to a class, on Dask, in shards
or on Gradescope. `grade()` chooses the engine; the engines call down, never up.

One submission's path, a module each:
    restore.py    put the locked check cells back as the solution has them, tagged
    tamper.py     refuse notebooks whose own code forges results or rewrites the checks
    demos.py      --checks-only: leave out demo cells no check depends on
    isolated.py   run it in a child process and folder, with limits (parent side)
    execute.py    the child: papermill, and the witness pipe the grader trusts
    results.py    read each check's result, only from a check that ran to its end
    records.py    the rows, submissions and graded results passed around
    submission.py grade one submission from its bytes: the above in order
    settings.py   run settings and the fingerprints that let a rerun reuse grades
The writers and engines above it:
    feedback.py   grades.csv, summary.csv and each learner's feedback
    outbox.py     the one writer of an output folder, and its state file
    serial.py     this machine, --jobs N at a time
    cluster.py    --dask ADDRESS|local:N: a task per submission, the client the writer
    shards.py     --shard I/N and `course grade merge`
    gradescope.py `course export gradescope`: the autograder zip
    autograder.py the grading side inside Gradescope
"""

from __future__ import annotations

from pathlib import Path

from ..authoring import read
from ..errors import UsageError
from .outbox import GradeSummary, Outbox
from .settings import RunSettings, solutions_digest
from .submission import find_submissions, isolation_for

__all__ = ["GradeSummary", "grade"]


def _lesson(lesson: str | None, sols: dict) -> str | None:
    """`--lesson NN` (or a full stem) as a solution's stem."""
    if lesson is None:
        return None
    stem = lesson.removesuffix(".ipynb")
    found = [s for s in sols if s == stem] or [s for s in sols if s.startswith(stem + "_")]
    if len(found) != 1:
        raise UsageError(
            f"--lesson {lesson}: no single solution notebook matches (known: {', '.join(sorted(sols))})"
        )
    return found[0]


def announce_isolation(requested: str, private: list[Path]) -> None:
    """Say, before any notebook runs, how learners' code will be isolated on this machine
    (each submission's own line in the log repeats it where it differs, e.g. a Dask worker),
    and what a grading user could still read. Raises UsageError where no sandbox is possible."""
    import sys

    from .sandbox import exposure

    isolation = isolation_for(requested)
    loud = "WARNING: " if isolation.level == "none" else ""
    print(f"course grade: {loud}learners' code runs in: {isolation.describe()}", file=sys.stderr)
    for seen in exposure(isolation, private):
        print(f"course grade: WARNING: {seen}", file=sys.stderr)


def grade(
    paths: list[Path],
    out: Path = Path("grades"),
    solutions: Path = Path("solutions"),
    *,
    cell_timeout: float = 600,
    notebook_timeout: float | None = None,
    quick: bool = False,
    jobs: int = 1,
    checks_only: bool = False,
    dask: str | None = None,
    shard: str | None = None,
    allow_mixed_devices: bool = False,
    lesson: str | None = None,
    isolation: str = "auto",
) -> GradeSummary:
    """Grade every submission under `paths`: on this machine (`jobs` at a time), on a Dask
    cluster (`dask`: an address or local:N), or only one shard's part (`shard`: I/N)."""
    subs = find_submissions(paths)
    sol_paths = sorted(Path(solutions).glob("*.ipynb"))
    if not sol_paths:
        raise UsageError(
            f"no solution notebooks in {solutions}: the locked check cells come from there"
        )
    sols = {p.stem: read(p) for p in sol_paths}
    lesson = _lesson(lesson, sols)
    run = RunSettings(
        cell_timeout,
        notebook_timeout or max(3600.0, 4 * cell_timeout),
        quick,
        checks_only,
        isolation,
    )
    announce_isolation(run.isolation, [*(s.path for s in subs), Path(solutions), Path(out)])
    if shard is not None:
        from .shards import start_shard

        subs, out = start_shard(subs, out, shard, solutions_digest(sol_paths), run)
    if dask is not None:
        from .cluster import grade_on_dask

        return grade_on_dask(
            subs,
            sols,
            solutions_digest(sol_paths),
            run,
            Outbox(out),
            dask,
            allow_mixed_devices=allow_mixed_devices,
            lesson=lesson,
        )
    from .serial import grade_serially

    return grade_serially(subs, sols, sol_paths, run, Outbox(out), jobs=jobs, lesson=lesson)
