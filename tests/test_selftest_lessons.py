"""Each lesson's `selftest` entry: an answer for every registered check, effects that can be
named, and lesson 06's packaged reference scripts equal to the notebook's %%writefile cells."""

from __future__ import annotations

from pathlib import Path

from course_utils.authoring import read
from course_utils.lessons.distributed.reference_scripts import SCRIPTS, written_by
from course_utils.selftest.items import LESSONS, discover, lesson_checks, lesson_selftest

ROOT = Path(__file__).resolve().parents[1]


def test_every_registered_check_has_the_reference_answers_its_lesson_gives():
    missing = [
        c for p in LESSONS for c in lesson_checks(p) if c not in lesson_selftest(p).answers()
    ]
    assert not missing, f"checks the selftest cannot call with a reference answer: {missing}"
    assert sum(len(lesson_checks(p)) for p in LESSONS) >= 36


def test_answers_name_only_registered_checks():
    for prefix in LESSONS:
        assert set(lesson_selftest(prefix).answers()) <= set(lesson_checks(prefix))


def test_notebooks_that_record_an_effect_have_one_in_their_selftest():
    recorded = set()
    for path in sorted((ROOT / "solutions").glob("*.ipynb")):
        if any("cu.effect(" in c.source for c in read(path).cells if c.cell_type == "code"):
            recorded.add(path.stem.split("_")[0])
    with_effect = {i.lesson for i in discover() if i.kind == "effect"}
    assert recorded == with_effect


def test_lesson_06_reference_scripts_equal_the_notebook_cells():
    assert SCRIPTS == written_by(read(ROOT / "solutions" / "06_ddp.ipynb"))
