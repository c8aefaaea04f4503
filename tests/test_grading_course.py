"""`course grade` on the course's real notebooks, in quick mode: an untouched learner copy
earns nothing and says not-attempted; the solution earns every point."""

from __future__ import annotations

import csv
import os
import shutil
from pathlib import Path

import pytest

from course_utils.grading import grade

ROOT = Path(__file__).resolve().parents[1]
LEARNER = sorted((ROOT / "notebooks").glob("*.ipynb"))

pytestmark = pytest.mark.timeout(1800)
# CI grades seven untouched copies with --checks-only (demo cells skipped): 06 (files written
# by %%writefile, checked under torchrun), 11 (the capstone), and 01, 02, 02b (a class as an
# answer), 12 and 16, whose untouched copies tests/test_learner_path.py leaves to
# COURSE_TESTS=all.
# That file runs every other untouched copy as a learner does, and COURSE_TESTS=all grades
# every notebook here, every demo included, on the lessons' reference answers.
ALL = os.environ.get("COURSE_TESTS") == "all"
IN_CI = ("01_one_cycle", "02_batch_size", "02b_large_batch", "06_ddp", "11_capstone")
IN_CI += ("12_transformers", "16_tensor_pipeline")


def _rows(out: Path) -> list[dict]:
    with open(out / "grades.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_untouched_learner_notebooks_grade_not_attempted(tmp_path):
    """Every check of every untouched learner copy says not-attempted (and, with
    COURSE_TESTS=all, every demo runs on the lesson's reference answers). Two at a time: no
    timing is graded here."""
    subs = tmp_path / "subs"
    subs.mkdir()
    chosen = [nb for nb in LEARNER if ALL or nb.stem in IN_CI]
    for nb in chosen:
        shutil.copy(nb, subs / nb.name)
    grade(
        [subs],
        out=tmp_path / "out",
        solutions=ROOT / "solutions",
        quick=True,
        cell_timeout=600,
        jobs=2,
        checks_only=not ALL,
    )
    rows = _rows(tmp_path / "out")
    assert {r["notebook"] for r in rows} == {nb.stem for nb in chosen}
    assert {r["status"] for r in rows} == {"not-attempted"}, [
        r for r in rows if r["status"] != "not-attempted"
    ]


@pytest.mark.skipif(not ALL, reason="COURSE_TESTS=all: test_gradescope grades solved 04 and 08")
def test_solved_measuring_notebook_earns_every_point(tmp_path):
    sub = tmp_path / "alice_00_measuring.ipynb"
    shutil.copy(ROOT / "solutions" / "00_measuring.ipynb", sub)
    grade([sub], out=tmp_path / "out", solutions=ROOT / "solutions", quick=True, cell_timeout=600)
    rows = _rows(tmp_path / "out")
    assert rows and all(r["status"] == "passed" for r in rows), rows
