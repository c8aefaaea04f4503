"""Every learner copy, run as a learner runs it: no parameters, Run All, no test runner in the
kernel's environment (course_utils.learner_run). Untouched, every cell runs, each check shows
not-attempted, and each demo that needs an unwritten answer says it uses the reference. Half
solved (every other exercise), the solved checks pass and their demos use the learner's answer.

CI runs the untouched copy of every notebook but LEFT_TO_ALL and the half-solved copy of
HALF_SOLVED_IN_CI;
COURSE_TESTS=all runs every half-solved copy. Two notebooks run at a time, as in
test_notebooks.py (no timing is graded in a learner copy's run here).
"""

from __future__ import annotations

import os
import re
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from course_utils import learner_run
from course_utils.authoring import check_id_of, read
from course_utils.grading.demos import names

ROOT = Path(__file__).resolve().parents[1]
ALL = os.environ.get("COURSE_TESTS") == "all"
# CI's 30 minutes leave out the longest untouched copies (seconds in CI at 6a48c79 and 8cb8d60,
# two at a time; 11 and 06 idle, one at a time, docs/results/learner-path-cpu-auto.md): 00
# (126 s) runs whole in CI in test_book's real `course report` (its solution, every demo); 12
# (99 s), 02b (93 s), 02 (74 s), 01 (69 s), 11 (54 s), 16 (40 s) and 06 (38 s) run their
# checks untouched in test_grading_course.py and their solved checks in test_lesson_*.py.
# COURSE_TESTS=all runs them.
LEFT_TO_ALL = ("00_measuring", "01_one_cycle", "02_batch_size", "02b_large_batch")
LEFT_TO_ALL += ("06_ddp", "11_capstone", "12_transformers", "16_tensor_pipeline")
EVERY = sorted((ROOT / "notebooks").glob("*.ipynb"))
LEARNER = [p for p in EVERY if ALL or p.stem not in LEFT_TO_ALL]
HALF_SOLVED_IN_CI = ("09_no_bias_before_bn",)
HALF = [p for p in LEARNER if ALL or p.stem in HALF_SOLVED_IN_CI]
AT_ONCE = 2
# the longest first (docs/results/learner-path-cpu-auto.md), so the last run is not alone
LONGEST = (
    "01_one_cycle",
    "11_capstone",
    "06_ddp",
    "10_habits",
    "00_measuring",
    "09_no_bias_before_bn",
)
# A cell silent for longer looks hung to a learner; the goal is 5 s on an idle 2-core machine,
# and two notebooks at a time here stretch a cell about 2x (course_utils.learner_run).
SILENCE_S = 10.0
USES = re.compile(r"learner_or_reference\(\s*(\w+),\s*[\w.]+,\s*\"(\w+)\"")

pytestmark = pytest.mark.timeout(1800)


def _run(path: Path, workdir: Path, solved: bool) -> learner_run.LearnerRun:
    if solved:
        nb, _ = learner_run.half_solved(read(ROOT / "solutions" / path.name), path.name)
    else:
        nb = read(path)
    return learner_run.run(nb, workdir=workdir, name=path.stem, cell_timeout=600)


UNTOUCHED = "test_untouched_learner_copy_runs_every_cell_and_each_check_says_not_attempted"
HALF_SOLVED = "test_half_solved_copy_passes_the_solved_checks_and_demos_use_those_answers"


@pytest.fixture(scope="module")
def runs(request, tmp_path_factory):
    """{(notebook, solved?): its run} for the tests selected, AT_ONCE at a time, longest first."""
    kinds = {UNTOUCHED: False, HALF_SOLVED: True}
    jobs = [
        (item.callspec.params["path"], kinds[item.originalname])
        for item in request.session.items
        if item.originalname in kinds
    ]
    jobs.sort(key=lambda job: LONGEST.index(job[0].stem) if job[0].stem in LONGEST else 99)
    with ThreadPoolExecutor(max_workers=AT_ONCE) as pool:
        futures: dict[tuple[str, bool], Future] = {
            (p.stem, solved): pool.submit(_run, p, tmp_path_factory.mktemp(p.stem), solved)
            for p, solved in jobs
        }
        yield futures
        for future in futures.values():
            future.cancel()


def _solved_names(nb) -> set[str]:
    """The names the learner's exercise cells define, once solved (no stub left in them)."""
    exercises = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("solution")]
    solved = [c for c in exercises if "raise NotImplementedError()" not in c.source]
    return set().union(*(names(c.source)[0] for c in solved))


def _expectations(run: learner_run.LearnerRun, nb, solved: set[str]) -> list[str]:
    """What differs from a learner's path that works: errors, verdicts, reference notices."""
    problems = []
    for cell in run.cells:
        where = f"cell {cell.index} ({cell.kind})"
        source = nb.cells[cell.index].source
        if cell.error:
            problems.append(f"{where} raised {cell.error}: Run All would stop there")
        if cell.kind == "check":
            want = {check_id_of(nb.cells[cell.index])}
            if set(cell.verdicts) != want:
                problems.append(f"{where} showed verdicts {cell.verdicts}, expected one for {want}")
        for fn, what in USES.findall(source):
            fell_back = what in cell.reference_for
            if fell_back == (fn in solved):
                problems.append(
                    f"{where}: demo of `{fn}` "
                    + ("fell back to the reference" if fell_back else "used an unchecked answer")
                )
        if cell.stale_bars:
            problems.append(f"{where} left a progress bar unfinished: {cell.stale_bars[0]!r}")
        silent = cell.first_output_s if cell.first_output_s is not None else cell.seconds
        if silent > SILENCE_S:
            problems.append(f"{where} ran {silent:.0f} s before its first output")
    return problems


@pytest.mark.parametrize("path", LEARNER, ids=[p.stem for p in LEARNER])
def test_untouched_learner_copy_runs_every_cell_and_each_check_says_not_attempted(path, runs):
    run = runs[(path.stem, False)].result()
    assert run.mode_line, "the setup cell says which mode it chose"
    assert not _expectations(run, read(path), solved=set())
    statuses = {s for c in run.cells for s in c.verdicts.values()}
    assert statuses == {"not-attempted"}


@pytest.mark.parametrize("path", HALF, ids=[p.stem for p in HALF])
def test_half_solved_copy_passes_the_solved_checks_and_demos_use_those_answers(path, runs):
    run = runs[(path.stem, True)].result()
    nb, solved_checks = learner_run.half_solved(read(ROOT / "solutions" / path.name), path.name)
    assert not _expectations(run, nb, solved=_solved_names(nb))
    verdicts = {k: v for c in run.cells for k, v in c.verdicts.items()}
    passed = {k for k, v in verdicts.items() if v in ("passed", "not-applicable")}
    assert passed == solved_checks
    assert {v for k, v in verdicts.items() if k not in solved_checks} == {"not-attempted"}


@pytest.mark.parametrize("path", EVERY, ids=[p.stem for p in EVERY])
def test_every_demo_that_uses_an_answer_runs_after_that_answers_check(path):
    """Else the solution's own demo would fall back to the reference."""
    nb = read(ROOT / "solutions" / path.name)
    checked: set[str] = set()
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        if check_id_of(cell):
            checked |= names(cell.source)[1]
        for fn, _ in USES.findall(cell.source):
            assert fn in checked, f"a demo uses `{fn}` before its check cell ran"
