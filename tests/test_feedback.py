"""Feedback files: a learner's table never breaks on an unusual measured value."""

from course_utils.grading.feedback import feedback
from course_utils.grading.records import Row, Submission


def test_feedback_prints_values_that_are_not_numbers_instead_of_failing(tmp_path):
    """A check may report "inf" or a label as its value (read back from JSON): the batch goes on."""
    rows = [
        Row(
            "alice", "05_fast_kernels", "05-break-even", "passed", 2, 2, "inf", 1817.0, "cpu", "ok"
        ),
        Row("alice", "05_fast_kernels", "05-bucketing", "failed", 0, 3, 36, None, "cpu", "no"),
    ]
    text = feedback(Submission(tmp_path / "alice.ipynb", "alice"), rows, {})
    assert "| 05-break-even | passed | 2/2 | inf | 1817 |" in text
    assert "| 05-bucketing | failed | 0/3 | 36 |  |" in text


def test_the_table_gives_units_and_which_direction_is_better(tmp_path):
    rows = [
        Row(
            "bo",
            "00_measuring",
            "00-step-timer",
            "failed",
            0,
            2,
            2.096e-06,
            0.03,
            "cpu",
            "",
            unit=" s",
        ),
        Row(
            "bo",
            "04_mixed_precision",
            "04-amp-step",
            "failed",
            0,
            3,
            1.1,
            1.3,
            "cpu",
            "",
            unit="x",
            better="higher",
        ),
        Row(
            "bo",
            "07_accumulation",
            "07-plan",
            "passed",
            2,
            2,
            0.8,
            1.0,
            "cpu",
            "",
            unit="x",
            better="lower",
        ),
    ]
    text = feedback(Submission(tmp_path / "bo.ipynb", "bo"), rows, {})
    assert "| 2.096e-06 s | 0.03 s |" in text
    assert "| 1.1x | ≥ 1.3x (higher is better) |" in text
    assert "| 0.8x | ≤ 1x (lower is better) |" in text
