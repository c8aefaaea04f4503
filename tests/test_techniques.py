"""The technique table is the one place tip numbers and device classes are written."""

from pathlib import Path

from course_utils.device import CHANNELS_LAST
from course_utils.techniques import ALL_CLASSES, GUIDE_TIPS, TECHNIQUES

ROOT = Path(__file__).resolve().parents[1]


def test_every_tip_of_the_guide_is_taught_by_a_lesson_that_exists():
    lessons = {p.stem for p in (ROOT / "solutions").glob("*.ipynb")}
    taught = {t.tip for t in TECHNIQUES if t.tip is not None and t.lesson in lessons}
    assert taught == set(GUIDE_TIPS)


def test_channels_last_pays_where_the_device_table_says_it_does():
    (row,) = [t for t in TECHNIQUES if t.name.startswith("channels_last")]
    assert set(row.classes) == {c for c, (fp32, amp, _) in CHANNELS_LAST.items() if fp32 or amp}


def test_every_technique_names_known_device_classes_and_one_line_of_code():
    for t in TECHNIQUES:
        assert set(t.classes) <= set(ALL_CLASSES), t.name
        assert t.code and "\n" not in t.code, t.name
