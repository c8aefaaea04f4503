"""The README lists every check whose verdict rests on readings taken beside the learner's code
(course_utils.grading.trust), as the checks declare them."""

from __future__ import annotations

from pathlib import Path

from course_utils.grading.trust import BEGIN, END, in_kernel_table

README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_readmes_table_of_in_kernel_readings_is_the_checks_own():
    text = README.read_text(encoding="utf-8")
    assert BEGIN in text and END in text, "README: the in-kernel table's markers are missing"
    shown = text[text.index(BEGIN) : text.index(END) + len(END)]
    assert shown == in_kernel_table(), "run: python -m course_utils.grading.trust"
