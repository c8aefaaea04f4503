"""`course grade` on a toy lesson made by code: every scenario of the grading contract.

The whole folder of fixture submissions is graded once (module fixture); each test then asks
one question of the grades. A cell limit of 40 s leaves room for torch's import on a loaded
2-core machine while keeping the hanging scenario short.
"""

from __future__ import annotations

import copy
import csv
import hashlib
import json

import pytest
from grading_fixtures import TOY, make_course

from course_utils.authoring import learner_copy, read
from course_utils.grading import grade, restore_checks

pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    root = tmp_path_factory.mktemp("course")
    solutions, subs = make_course(root)
    before = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in subs.iterdir()}
    summary = grade([subs], out=root / "out", solutions=solutions, cell_timeout=40, jobs=2)
    with open(root / "out" / "grades.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return {
        "root": root,
        "subs": subs,
        "solutions": solutions,
        "summary": summary,
        "rows": rows,
        "before": before,
    }


def status(graded, submission: str, check: str) -> dict:
    name = f"{submission}_{TOY}"
    return next(r for r in graded["rows"] if r["submission"] == name and r["check"] == check)


def test_grades_csv_has_the_contract_columns(graded):
    with open(graded["root"] / "out" / "grades.csv", newline="") as f:
        header = next(csv.reader(f))
    assert header == [
        "submission",
        "notebook",
        "check",
        "status",
        "points",
        "max_points",
        "value",
        "threshold",
        "device_class",
        "message",
    ]


def test_grade_marks_solved_notebook_passed(graded):
    for check, points in (("toy-double", "1.0"), ("toy-square", "2.0")):
        row = status(graded, "solved", check)
        assert (row["status"], row["points"]) == ("passed", points)


def test_grade_marks_untouched_notebook_not_attempted(graded):
    assert {status(graded, "untouched", c)["status"] for c in ("toy-double", "toy-square")} == {
        "not-attempted"
    }


def test_grade_fails_only_the_wrong_exercise(graded):
    assert status(graded, "solved_wrong_square", "toy-square")["status"] == "failed"
    assert "returned 8" in status(graded, "solved_wrong_square", "toy-square")["message"]
    assert status(graded, "solved_wrong_square", "toy-double")["status"] == "passed"


def test_grade_goes_on_past_a_cell_that_raises(graded):
    assert status(graded, "solved_raise_early", "toy-double")["status"] == "passed"
    assert status(graded, "solved_raise_early", "toy-square")["status"] == "passed"


def test_grade_marks_hanging_notebook_timeout(graded):
    row = status(graded, "solved_hang", "toy-square")
    assert row["status"] == "timeout" and "40 s" in row["message"]
    assert status(graded, "solved_hang", "toy-double")["status"] == "passed"


def test_grade_marks_checks_after_dead_kernel_missing(graded):
    row = status(graded, "solved_dies", "toy-square")
    assert row["status"] == "missing" and "kernel died" in row["message"]
    assert status(graded, "solved_dies", "toy-double")["status"] == "passed"


def test_grade_gives_unreadable_file_one_error_row(graded):
    rows = [r for r in graded["rows"] if r["submission"] == f"corrupt_{TOY}"]
    assert (
        len(rows) == 1
        and rows[0]["status"] == "error"
        and "not a readable notebook" in rows[0]["message"]
    )


def test_grade_restores_deleted_and_weakened_checks(graded):
    assert status(graded, "solved_tampered", "toy-double")["status"] == "passed"
    assert status(graded, "solved_tampered", "toy-square")["status"] == "passed"
    text = (
        graded["root"] / "out" / "feedback" / f"solved_tampered_{TOY.removesuffix('.ipynb')}.md"
    ).read_text()
    assert "edited this locked check cell" in text and "was missing from your notebook" in text


def test_grade_ignores_printed_and_displayed_fake_results(graded):
    assert status(graded, "forged", "toy-square")["status"] == "not-attempted"
    assert status(graded, "forged", "toy-double")["status"] == "passed"


def test_grade_never_changes_a_submission(graded):
    after = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in graded["subs"].iterdir()}
    assert after == graded["before"]


def test_grade_writes_summary_feedback_and_executed_notebooks(graded):
    out = graded["root"] / "out"
    with open(out / "summary.csv", newline="") as f:
        summary = {r["submission"]: r for r in csv.DictReader(f)}
    assert summary[f"solved_{TOY}"]["percent"] == "100.0"
    assert summary[f"untouched_{TOY}"]["percent"] == "0.0"
    assert (out / "feedback" / "solved_toy_lesson.md").read_text().startswith("# Feedback")
    assert (out / "executed" / "solved_toy_lesson.ipynb").exists()


def test_grade_reuses_unchanged_submissions(graded):
    root = graded["root"]
    summary = grade(
        [graded["subs"] / f"solved_{TOY}"],
        out=root / "out",
        solutions=graded["solutions"],
        cell_timeout=40,
    )
    assert summary.reused == 1


def test_restore_tags_only_the_first_claim_of_a_check(graded):
    sol = read(graded["solutions"] / TOY)
    sub = learner_copy(sol, TOY)
    sub.cells.append(copy.deepcopy(sub.cells[4]))  # a second cell claiming toy-double
    restored, _ = restore_checks(sub, sol, "toy_lesson")
    tagged = [
        c for c in restored.cells if c.metadata.get("course", {}).get("check") == "toy-double"
    ]
    assert len(tagged) == 1
    assert json.dumps(restored.cells[-1].metadata).count("nbgrader") == 0


def test_grade_rejects_missing_path(tmp_path):
    from course_utils.errors import UsageError

    with pytest.raises(UsageError, match="no such file"):
        grade([tmp_path / "nope"], out=tmp_path / "out", solutions=tmp_path)
