"""course_utils.grading.results: a result counts only from a check that ran to its end. Each
rule on a hand-made executed notebook (no kernel): what counts, what does not, and the cause
named when a check cell failed because a cell above it did."""

from __future__ import annotations

import nbformat
from grading_fixtures import TOY, toy_solution

from course_utils.grading.restore import restore_checks
from course_utils.grading.results import read_results
from course_utils.protocol import MIME

COMPLETED = {"outcome": "completed", "detail": ""}
LESSON = TOY.removesuffix(".ipynb")


def payload(check: str = "toy-double", status: str = "passed", points: float = 1.0) -> dict:
    return {
        "check_id": check,
        "status": status,
        "points": points,
        "max_points": 1.0,
        "device_class": "cpu",
        "message": "double(3) returned 6",
        "hint": "",
        "value": 6.0,
        "threshold": 6.0,
        "parts": [],
        "unit": " s",
        "better": "lower",
    }


def shown(data: dict) -> dict:
    return nbformat.v4.new_output("display_data", data={MIME: data, "text/plain": "✅"})


def executed(*outputs, before=(), lesson=LESSON):
    """The toy lesson restored, with `outputs` in toy-double's check cell and `before` (a cell
    source and its outputs) as the exercise cell above it."""
    sol = toy_solution()
    nb, _ = restore_checks(sol, sol, lesson)
    cell = next(c for c in nb.cells if c.metadata.get("course", {}).get("check") == "toy-double")
    cell.outputs = list(outputs)
    if before:
        exercise = next(c for c in nb.cells if c.source.startswith("def double"))
        exercise.source, exercise.outputs = before
    return nb, sol, lesson


def double_row(nb, sol, lesson, status=COMPLETED) -> dict:
    rows = read_results(nb, sol, lesson, status, cell_timeout=20)
    return next(r for r in rows if r["check"] == "toy-double")


def test_one_result_at_the_end_of_a_completed_cell_counts_with_its_unit():
    row = double_row(*executed(nbformat.v4.new_output("stream", text="hi\n"), shown(payload())))
    assert (row["status"], row["points"], row["unit"], row["better"]) == (
        "passed",
        1.0,
        " s",
        "lower",
    )


def test_a_result_then_an_error_counts_nothing():
    error = nbformat.v4.new_output("error", ename="KeyboardInterrupt", evalue="", traceback=[])
    row = double_row(*executed(shown(payload()), error))
    assert (
        row["status"] == "timeout"
        and row["points"] == 0
        and "after showing a result" in row["message"]
    )
    error = nbformat.v4.new_output("error", ename="SystemExit", evalue="0", traceback=[])
    row = double_row(*executed(shown(payload()), error))
    assert row["status"] == "error" and "ran to its end" in row["message"]


def test_two_results_or_another_checks_result_count_nothing():
    row = double_row(*executed(shown(payload()), shown(payload(status="failed", points=0))))
    assert row["status"] == "error" and "2 check results" in row["message"]
    row = double_row(*executed(shown(payload(check="toy-square"))))
    assert row["status"] == "error" and "'toy-square'" in row["message"]


def test_a_display_after_the_result_counts_nothing_but_a_figure_may_follow():
    figure = nbformat.v4.new_output(
        "display_data", data={"image/png": "iVBOR", "text/plain": "<Figure>"}
    )
    assert double_row(*executed(shown(payload()), figure))["status"] == "passed"
    html = nbformat.v4.new_output("display_data", data={"text/html": "<b>ok</b>"})
    assert double_row(*executed(shown(payload()), html))["status"] == "error"


def test_a_run_that_ended_inside_the_check_cell_counts_nothing():
    nb, sol, lesson = executed(shown(payload()))
    cell = next(c for c in nb.cells if c.metadata.get("course", {}).get("check") == "toy-double")
    died = {"outcome": "kernel-died", "detail": "DeadKernelError", "last_cell": cell["id"]}
    row = double_row(nb, sol, lesson, died)
    assert row["status"] == "error" and "kernel died while this check cell ran" in row["message"]
    square = next(r for r in read_results(nb, sol, lesson, died, 20) if r["check"] == "toy-square")
    assert square["status"] == "missing" and "before this check ran" in square["message"]


def test_a_forged_points_value_on_a_failed_result_earns_nothing():
    row = double_row(*executed(shown(payload(status="failed", points=1.0))))
    assert row["status"] == "failed" and row["points"] == 0


def test_a_name_error_names_the_cell_above_that_timed_out_or_raised():
    interrupted = nbformat.v4.new_output(
        "error", ename="KeyboardInterrupt", evalue="", traceback=[]
    )
    name_error = nbformat.v4.new_output(
        "error", ename="NameError", evalue="name 'double' is not defined", traceback=[]
    )
    above = ("while True:\n    pass\n\ndef double(x):\n    return x + x", [interrupted])
    row = double_row(*executed(name_error, before=above))
    assert "cell above that defines 'double'" in row["message"]
    assert "ran past the 20 s cell limit" in row["message"]
    raised = nbformat.v4.new_output("error", ename="ValueError", evalue="bad shape", traceback=[])
    row = double_row(*executed(name_error, before=(above[0], [raised])))
    assert "raised ValueError: bad shape" in row["message"]


def test_no_executed_notebook_leaves_every_check_missing_with_the_reason():
    sol = toy_solution()
    rows = read_results(None, sol, "toy_lesson", {"outcome": "tampered", "detail": ""}, 20)
    assert {r["status"] for r in rows} == {"missing"}
    assert all("changed by something other than the grader" in r["message"] for r in rows)


def test_a_huge_message_or_value_from_the_judge_is_cut_before_it_reaches_the_grades():
    """Issue 32's red team (e05) returned a 20 MB string: its verdict quoted it, and the
    grades, the feedback and the state file each grew past 100 MB."""
    verdict = {
        **payload(status="failed", points=0.0),
        "message": "you named '" + "x" * 5_000_000 + "'",
        "value": "y" * 1_000_000,
        "parts": [{"name": "p", "status": "failed", "points": 0, "max_points": 1,
                   "message": "z" * 1_000_000}] * 50,
    }  # fmt: skip
    nb, sol, lesson = executed(shown(payload()))
    row = double_row(nb, sol, lesson, {**COMPLETED, "verdicts": {"toy-double": verdict}})
    assert row["status"] == "failed"
    assert len(row["message"]) < 5000 and "more characters not kept" in row["message"]
    assert len(row["value"]) < 5000
    assert len(row["parts"]) == 20 and all(len(p["message"]) < 5000 for p in row["parts"])


def test_an_ordinary_message_is_kept_whole():
    verdict = payload(status="failed", points=0.0)
    nb, sol, lesson = executed(shown(payload()))
    row = double_row(nb, sol, lesson, {**COMPLETED, "verdicts": {"toy-double": verdict}})
    assert (row["message"], row["value"]) == ("double(3) returned 6", 6.0)


def test_a_keyboardinterrupt_the_grader_did_not_send_is_an_error_not_a_timeout():
    """The grader interrupts a cell only at its limit (20 s here): a check cell that raised
    KeyboardInterrupt after 0.5 s raised it itself (a forgery's way out), and is not told
    it ran too long; one that ran the 20 s was interrupted by the grader."""
    judged = {**COMPLETED, "verdicts": {}}
    for seconds, status, said in (
        (0.5, "error", "before its 20 s limit"),
        (20.3, "timeout", "ran past"),
    ):
        nb, sol, lesson = executed(
            nbformat.v4.new_output("error", ename="KeyboardInterrupt", evalue="", traceback=[])
        )
        cell = next(
            c for c in nb.cells if c.metadata.get("course", {}).get("check") == "toy-double"
        )
        cell.metadata["papermill"] = {"duration": seconds}
        row = double_row(nb, sol, lesson, judged)
        assert (row["status"], row["points"]) == (status, 0.0) and said in row["message"], row
