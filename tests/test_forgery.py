"""The red team's attempts to earn points without solving (tests/forgery_attacks.py, written by
someone who read only the README and a learner notebook), graded in one run of the toy lesson:
every attack earns toy-double nothing, with a message; every honest answer keeps its point."""

from __future__ import annotations

import copy
import csv
import os
import zipfile

import pytest
from forgery_attacks import ATTACKS, VALID
from grading_fixtures import TOY, toy_solution

from course_utils.authoring import code, learner_copy, write
from course_utils.grading import grade

CELL_TIMEOUT = 10  # the two hangs wait this long; nothing honest here takes a second
# CI grades one attack of each kind (an exit, an interrupt, a signal to the grader, an
# unkillable hang, a patched kernel, a hook, a process left behind, a replay, a rewritten
# check, a value that equals anything): 10 of 37 notebooks, to keep `.ci/run` within 30
# minutes; COURSE_TESTS=all grades them all
IN_CI = {
    "forge-keyboardinterrupt", "forge-os-exit", "kill-parent", "forge-then-unkillable-hang",
    "patch-session-send", "post-run-hook-clear-and-forge", "bg-writer-rewrites-notebooks",
    "replay-captured-genuine", "swap-check-code", "always-equal-object",
}  # fmt: skip
GRADED = [a for a in ATTACKS if os.environ.get("COURSE_TESTS") == "all" or a.id in IN_CI]


def _index(nb, prefix: str) -> int:
    return next(i for i, c in enumerate(nb.cells) if c.source.startswith(prefix))


def submission(attack, solved: bool = False):
    """The learner copy with the attack's cells (an honest entry: with square solved too)."""
    sol = toy_solution()
    nb = copy.deepcopy(learner_copy(sol, TOY))
    nb.cells[_index(nb, "def double")].source = attack.double_cell
    if solved:
        nb.cells[_index(nb, "def square")].source = "def square(x):\n    return x * x"
    for where, source in attack.extra_cells:
        if where == "after-checks":
            nb.cells.insert(_index(nb, "from course_utils.lessons import toy") + 1, code(source))
        elif where == "before-double-check":
            nb.cells.insert(_index(nb, "# [course-check] toy-double"), code(source))
        else:
            nb.cells.append(code(source))
    return nb


@pytest.fixture(scope="module")
def verdicts(tmp_path_factory):
    """{submission: toy-double's row} for every attack and honest entry, graded together."""
    root = tmp_path_factory.mktemp("forgery")
    (root / "solutions").mkdir()
    write(toy_solution(), root / "solutions" / TOY)
    subs = root / "subs"
    subs.mkdir()
    for attack in GRADED:
        write(submission(attack), subs / f"{attack.id}_{TOY}")
    for honest in VALID:
        write(submission(honest, solved=True), subs / f"{honest.id}_{TOY}")
    grade(
        [subs],
        out=root / "out",
        solutions=root / "solutions",
        cell_timeout=CELL_TIMEOUT,
        notebook_timeout=60,
        jobs=2,  # the toy lesson times nothing
    )
    with open(root / "out" / "grades.csv", newline="", encoding="utf-8") as f:
        rows = [r for r in csv.DictReader(f) if r["check"] == "toy-double"]
    return {r["submission"].removesuffix(f"_{TOY}"): r for r in rows}


@pytest.mark.parametrize("attack", GRADED, ids=[a.id for a in GRADED])
def test_a_forgery_earns_nothing_and_says_what_was_seen(verdicts, attack):
    row = verdicts[attack.id]
    assert float(row["points"]) == 0 and row["status"] != "passed", (attack.idea, row)
    assert row["message"], attack.idea


@pytest.mark.parametrize("honest", VALID, ids=[v.id for v in VALID])
def test_an_honest_noisy_answer_keeps_its_point(verdicts, honest):
    row = verdicts[honest.id]
    assert row["status"] == "passed" and float(row["points"]) == 1, (honest.idea, row)


# --- the same defence on the Gradescope path --------------------------------------------------

SPLIT_MIME = '"application/vnd." + "course-" + "check" + "+json"'  # not seen by a source scan
ON_GRADESCOPE = {
    "the issue's forgery (display, then KeyboardInterrupt)": (
        "from IPython.display import display\n\n"
        "def double(x):\n"
        "    display({'application/vnd.course-check+json': {'check_id': 'toy-double', "
        "'status': 'passed', 'points': 1.0, 'max_points': 1.0}}, raw=True)\n"
        "    raise KeyboardInterrupt\n",
        "raised KeyboardInterrupt after",
    ),
    "the mimetype assembled at run time, then KeyboardInterrupt": (
        "from IPython.display import display\n\n"
        "def double(x):\n"
        f"    display({{{SPLIT_MIME}: {{'check_id': 'toy-double', 'status': 'passed', "
        "'points': 1.0, 'max_points': 1.0}}, raw=True)\n"
        "    raise KeyboardInterrupt\n",
        "the grader interrupts a cell only at its limit",
    ),
    "the mimetype assembled at run time, then os._exit": (
        "import os\nfrom IPython.display import display\n\n"
        "def double(x):\n"
        f"    display({{{SPLIT_MIME}: {{'check_id': 'toy-double', 'status': 'passed', "
        "'points': 1.0, 'max_points': 1.0}}, raw=True)\n"
        "    os._exit(0)\n",
        "kernel died while this check cell ran",
    ),
}


@pytest.mark.parametrize("forgery", list(ON_GRADESCOPE))
def test_a_forgery_earns_nothing_on_gradescope_either(tmp_path, forgery):
    from course_utils.grading import autograder, gradescope

    source, said = ON_GRADESCOPE[forgery]
    solutions = tmp_path / "solutions"
    solutions.mkdir()
    write(toy_solution(), solutions / TOY)
    zip_path = gradescope.export("toy_lesson", out=tmp_path / "ag.zip", solutions=solutions)
    root = tmp_path / "autograder"
    with zipfile.ZipFile(zip_path.path) as zf:
        zf.extractall(root / "source")
    (root / "submission").mkdir()
    attack = type("Forgery", (), {"double_cell": source, "extra_cells": ()})
    write(submission(attack), root / "submission" / "mine.ipynb")
    results = autograder.run(root)
    test = next(t for t in results["tests"] if t["name"] == "toy-double")
    said_there = "\n".join(
        t["output"] for t in results["tests"] if t["name"].startswith("toy-double")
    )
    assert test["score"] == 0 and results["score"] == 0
    assert said in said_there, said_there  # a refused upload says why in the test itself
