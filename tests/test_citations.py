"""Notebooks cite Kuhn's guide by the guide's own tip numbers, never a translation's sections."""

import json
import re
from pathlib import Path

import pytest

from course_utils.techniques import TECHNIQUES, tips_of

SOLUTIONS = Path(__file__).resolve().parents[1] / "solutions"

# The guide's own numbering lives in course_utils.guide (GUIDE_TIPS), and course_utils.techniques
# ties each tip to its lesson: a lesson must cite every tip it teaches.
TIPS = {t.lesson: tips_of(t.lesson) for t in TECHNIQUES if t.tip is not None}


def markdown(name: str) -> str:
    nb = json.loads((SOLUTIONS / f"{name}.ipynb").read_text())
    return "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown")


@pytest.mark.parametrize("name", sorted(TIPS))
def test_notebook_cites_the_guides_own_tip_numbers(name):
    text = markdown(name)
    cited = {int(n) for n in re.findall(r"\b[Tt]ips? (\d+)", text)}
    cited |= {int(n) for n in re.findall(r"\b[Tt]ips \d+ and (\d+)", text)}
    assert TIPS[name] <= cited, f"{name} cites tips {sorted(cited)}, expected {sorted(TIPS[name])}"
    assert not (cited - set(range(1, 18))), f"{name} cites a tip the guide does not have"


@pytest.mark.parametrize("name", sorted(TIPS))
def test_the_guide_is_never_cited_by_section(name):
    for line in markdown(name).splitlines():
        if "efficientdl.com" in line or "guide" in line.lower():
            assert not re.search(
                r"\b[Ss]ection \d+\b[^.]*guide|guide[^.]*\b[Ss]ection \d+\b", line
            ), line
