"""Feedback files: a learner's table never breaks on an unusual measured value."""

from course_utils.feedback import feedback
from course_utils.records import Row, Submission


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
