"""`course grade --checks-only` leaves out only demo cells no check depends on.

Static, for all twelve notebooks: no name a demo cell binds or mutates is read by a later cell
that runs, in the solution and in the learner copy. Dynamic, on one cheap notebook (08): the
solution, the untouched copy and a half-solved copy get the same verdicts either way.
"""

from __future__ import annotations

import copy
import csv
from pathlib import Path

import nbformat
import pytest

from course_utils.authoring import code, read, write
from course_utils.grading import grade
from course_utils.grading.demos import SKIPPED, is_demo, names, skip_demos, skippable
from course_utils.learner_run import half_solved

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = sorted((ROOT / "solutions").glob("*.ipynb"))


@pytest.mark.parametrize("path", SOLUTIONS, ids=[p.stem for p in SOLUTIONS])
def test_no_later_cell_reads_what_a_demo_cell_defines(path):
    sol = read(path)
    demos = [i for i, c in enumerate(sol.cells) if is_demo(c)]
    assert demos, f"{path.name} tags no demo cell"
    later_reads = set()
    for i in range(len(sol.cells) - 1, -1, -1):
        cell = sol.cells[i]
        if cell.cell_type != "code":
            continue
        writes, reads = names(cell.source)
        if is_demo(cell):
            assert not writes & later_reads, (
                f"{path.name} cell {i} is tagged demo, but a later cell reads "
                f"{sorted(writes & later_reads)}"
            )
        else:
            later_reads |= reads
    learner = read(ROOT / "notebooks" / path.name)
    _, skipped = skip_demos(copy.deepcopy(learner), sol)
    assert skipped == len(demos)


def test_a_learner_cell_that_reads_a_demo_result_keeps_that_demo_and_what_it_needs():
    cells = [
        code("data = load()", tags=("demo",)),
        code("summary = describe(data)", tags=("demo",)),
        code("plot(other)", tags=("demo",)),
        code("def mine(x):\n    return x + summary"),
    ]
    assert skippable(cells, [is_demo(c) for c in cells]) == {2}


def test_a_submission_cannot_mark_its_own_cells_demo():
    sol = nbformat.v4.new_notebook(cells=[code("print('demo')", tags=("demo",))])
    sub = nbformat.v4.new_notebook(
        cells=[code("answer = 42", tags=("demo",)), code("print('demo')")]
    )
    skipped, n = skip_demos(sub, sol)
    assert (
        n == 1 and skipped.cells[0].source == "answer = 42" and skipped.cells[1].source == SKIPPED
    )


def test_magics_read_the_names_they_expand():
    assert "workdir" in names("%%writefile {workdir}/train.py\nprint('hi')")[1]
    assert "path" in names("!ls $path")[1]


def _verdicts(out: Path) -> dict:
    with open(out / "grades.csv", newline="") as f:
        return {
            (r["submission"], r["check"]): (r["status"], r["points"]) for r in csv.DictReader(f)
        }


@pytest.mark.timeout(900)
def test_checks_only_gives_the_same_verdicts_on_solution_and_half_solved(tmp_path):
    """The untouched copy is left out: its checks are all not-attempted either way, which
    test_grading_course shows for every notebook."""
    name = "08_gradient_clipping.ipynb"
    sol = read(ROOT / "solutions" / name)
    subs = tmp_path / "subs"
    subs.mkdir()
    write(sol, subs / f"solution_{name}")
    write(half_solved(sol, name)[0], subs / f"half_{name}")
    kw = {"solutions": ROOT / "solutions", "quick": True, "cell_timeout": 600, "jobs": 2}
    grade([subs], out=tmp_path / "full", **kw)
    grade([subs], out=tmp_path / "checks", checks_only=True, **kw)
    full, checks = _verdicts(tmp_path / "full"), _verdicts(tmp_path / "checks")
    assert full == checks
    statuses = {status for status, _ in full.values()}
    assert {"passed", "not-attempted"} <= statuses  # the half-solved copy has both
    executed = nbformat.read(
        str(tmp_path / "checks" / "executed" / f"solution_{name[:-6]}.ipynb"), 4
    )
    assert sum(c.source == SKIPPED for c in executed.cells) == sum(map(is_demo, sol.cells))
