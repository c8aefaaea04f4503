"""Grade one submission, from its bytes: restore its locked checks, run it in its own process
and folder, read what the restored checks reported, and return its rows.

A submission is never written to. Before it runs, its locked check cells are restored from
`solutions/` by grade_id (a deleted or edited check comes back as the instructor wrote it),
every output is cleared, and the restored cells are tagged in metadata by the grader. Its
kernel runs sandboxed on the answer-free harness, and each check is decided by the judge
outside it (isolated.py, execute.py, judge.py); a notebook whose own code reaches into the
check machinery (tamper.py) changes nothing, and its feedback says so.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import nbformat

from ..authoring import check_cells
from ..errors import UsageError
from ..protocol import ERROR, MIME
from . import kernel_harness, sandbox
from .demos import skip_demos
from .isolated import Sandboxed, execute_isolated
from .records import Graded, Row, Submission
from .restore import lesson_for, restore_checks
from .results import read_results
from .settings import RunSettings
from .tamper import suspicious_cells

NOTEBOOK_NOTE = "*"  # notes' key for what is said of the whole notebook, not one check
WORKDIR_PREFIX = "course-grade-"  # then the grading process's pid: see sweep_orphans


def _alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def sweep_orphans(tmp: Path | None = None) -> list[Path]:
    """Remove the work folders of grading processes that are gone (a killed grader, a Dask
    worker that died mid-task): the learner's notebook and the kernel's connection file in
    them are left behind only until the next submission graded on this machine."""
    removed = []
    for folder in Path(tmp or tempfile.gettempdir()).glob(f"{WORKDIR_PREFIX}*-*"):
        pid = folder.name.removeprefix(WORKDIR_PREFIX).split("-")[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(folder)
    return removed


def find_submissions(paths: list[Path]) -> list[Submission]:
    found = []
    for path in paths:
        if not path.exists():
            raise UsageError(f"no such file or folder: {path}")
        if path.is_file():
            found.append(Submission(path, path.name))
        else:
            for nb in sorted(path.rglob("*.ipynb")):
                if ".ipynb_checkpoints" not in nb.parts:
                    found.append(Submission(nb, nb.relative_to(path).as_posix()))
    if not found:
        raise UsageError("nothing to grade: no .ipynb files in " + ", ".join(map(str, paths)))
    return found


def read_data(sub: Submission) -> bytes:
    try:
        return sub.path.read_bytes()
    except OSError:
        return b""


CELL_OUTPUT_CAP = 1_000_000  # characters of output kept per cell in the executed notebook


def cap_outputs(nb, cap: int = CELL_OUTPUT_CAP) -> int:
    """Keep at most `cap` characters of each cell's outputs in the executed notebook that is
    stored (and sent back by a Dask worker), saying in the cell what was left out; check
    results are always kept. Returns the characters left out. Runs after the results are read."""
    dropped_total = 0
    for cell in nb.cells:
        kept, size, dropped = [], 0, 0
        for out in cell.get("outputs", []):
            length = len(json.dumps(out))
            if MIME in out.get("data", {}) or size + length <= cap:
                kept.append(out)
                size += length
            elif out.get("output_type") == "stream" and size < cap:
                room = cap - size
                kept.append(nbformat.from_dict({**out, "text": out["text"][:room]}))
                size, dropped = cap, dropped + length - room
            else:
                dropped += length
        if dropped:
            note = (
                f"\n[course grade: this cell's outputs came to {(size + dropped) / 1e6:.1f} MB; "
                f"the stored copy keeps the first {cap / 1e6:.1f} MB]\n"
            )
            cell.outputs = [*kept, nbformat.v4.new_output("stream", name="stderr", text=note)]
            dropped_total += dropped
    return dropped_total


def _every_check(
    name: str, lesson: str, solution, status: str, reason: str, here: str
) -> list[Row]:
    """A row per check of the lesson, each at 0 of its points: a notebook that could not be
    graded still counts against its lesson's total."""
    return [
        Row(
            name,
            lesson,
            cid,
            status,
            0.0,
            float(cell.metadata.get("nbgrader", {}).get("points", 1)),
            None,
            None,
            here,
            reason,
        )
        for cid, (_, cell) in check_cells(solution, lesson).items()
    ]


def lesson_by_name(filename: str, solutions: dict) -> str | None:
    """The lesson a file name claims (its number prefix, e.g. `08_` or `08-`), if exactly one."""
    stem = Path(filename).name
    hits = [s for s in solutions if s in stem or stem.startswith(s.split("_")[0] + "_")]
    return hits[0] if len(set(hits)) == 1 else None


def grade_submission(
    name: str,
    filename: str,
    data: bytes,
    solutions: dict,
    run: RunSettings,
    *,
    lesson: str | None = None,
    gpu: int | None = None,
    env: dict[str, str | None] | None = None,
) -> Graded:
    """Grade one submission from its bytes (no path needed: a Dask worker has none) in a
    temporary folder; return its rows, notes and executed notebook. `lesson`: the one lesson
    being graded (`--lesson`), else told from the notebook (metadata, file name, checks)."""
    from .. import device

    t0, here = time.perf_counter(), device.device_class()
    try:
        nb = nbformat.reads(data.decode("utf-8"), as_version=4)
        if not hasattr(nb, "cells"):
            raise ValueError("no cells")
    except Exception as exc:
        text = str(exc).strip()
        first = text.splitlines()[0][:150] if text else ""
        reason = (
            f"not a readable notebook ({type(exc).__name__}: {first}). Download it again "
            "from JupyterLab (File > Download) or Colab (File > Download .ipynb) and resubmit it"
        )
        told = lesson or lesson_by_name(filename, solutions)
        rows = (
            _every_check(name, told, solutions[told], ERROR, reason, here)
            if told
            else [Row.error(name, reason)]
        )
        return Graded(rows, seconds=time.perf_counter() - t0, device_class=here)
    found = lesson_for(nb, filename, solutions)
    if lesson and found and found != lesson:
        reason = f"this is a copy of {found}, not of {lesson}: submit your {lesson}.ipynb"
        return Graded(_every_check(name, lesson, solutions[lesson], ERROR, reason, here))
    lesson = lesson or found
    if lesson is None:
        reason = (
            "not a notebook of this course: no lesson matches its metadata, name or check cells"
        )
        return Graded([Row.error(name, reason)], seconds=time.perf_counter() - t0)
    seen = suspicious_cells(nb, solutions[lesson])
    prepared, notes = restore_checks(nb, solutions[lesson], lesson)
    if seen:  # no effect on grades (the judge decides outside): said, for the instructor
        notes[NOTEBOOK_NOTE] = (
            "this notebook's own code reaches into the check machinery or its results ("
            + "; ".join(seen[:3])
            + "). That changes nothing: every check is decided by the grader's judge, outside "
            "the notebook"
        )
    skipped = 0
    if run.checks_only:
        prepared, skipped = skip_demos(prepared, solutions[lesson])
    sweep_orphans()
    package = lesson_package(lesson)
    with (
        sandbox.user_slot(isolation_for(run.isolation)) as isolation,
        tempfile.TemporaryDirectory(prefix=f"{WORKDIR_PREFIX}{os.getpid()}-") as tmp,
    ):
        sandboxed = Sandboxed(isolation, kernel_harness.for_lesson(package), package)
        executed, status = execute_isolated(
            prepared,
            Path(tmp),
            cell_timeout=run.cell_timeout,
            notebook_timeout=run.notebook_timeout,
            quick=run.quick,
            gpu=gpu,
            env=env,
            sandboxed=sandboxed,
        )
    results = read_results(executed, solutions[lesson], lesson, status, run.cell_timeout)
    if executed is not None:
        cap_outputs(executed)
    rows = [Row(name, lesson, **r) for r in results]
    for row in rows:  # a check that never reported (missing, timeout) still ran on this device
        row.device_class = row.device_class or here
    graded = Graded(
        rows, notes, executed, time.perf_counter() - t0, device_class=here, skipped_demos=skipped
    )
    graded.isolation = isolation.describe()
    return graded


@functools.cache
def isolation_for(requested: str) -> sandbox.Isolation:
    """The isolation this process grades with (probed once: bwrap starts a test sandbox)."""
    return sandbox.choose(requested)


def lesson_package(stem: str) -> str | None:
    """The lesson package a solution notebook imports (`00_measuring` -> `measuring`)."""
    from ..selftest.items import LESSONS

    found = [package for notebook, package in LESSONS.values() if notebook == stem]
    return found[0] if found else None
