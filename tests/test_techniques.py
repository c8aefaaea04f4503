"""The technique table is the one place tip numbers and device classes are written."""

from pathlib import Path

from course_utils.device import CHANNELS_LAST
from course_utils.guide import GUIDE_TIPS
from course_utils.techniques import ALL_CLASSES, TECHNIQUES

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


def _effect_names(notebook: Path) -> list[str]:
    """The literal start of each `cu.effect` technique name in a solution notebook (an f-string
    up to its first placeholder), read statically."""
    import ast

    from course_utils.authoring import read

    names = []
    for cell in read(notebook).cells:
        if cell.cell_type != "code" or "cu.effect(" not in cell.source:
            continue
        for node in ast.walk(ast.parse(cell.source)):
            func = getattr(node, "func", None)
            if isinstance(func, ast.Attribute) and func.attr == "effect" and node.args:
                first = node.args[0]
                if isinstance(first, ast.JoinedStr):
                    first = first.values[0]
                names.append(first.value)
    return names


def test_every_headline_effect_belongs_to_exactly_one_technique_of_its_lesson():
    """The cheat sheet shows each measured figure on the row it measured: 10's whole fixed loop
    is not "tensors made on the device", 09's conv+BN fusion is not "no bias before BN"."""
    for path in sorted((ROOT / "solutions").glob("*.ipynb")):
        rows = [t for t in TECHNIQUES if t.lesson == path.stem and t.effect]
        for name in _effect_names(path):
            owners = [t.name for t in rows if name.startswith(t.effect)]
            assert len(owners) == 1, (path.stem, name, [t.effect for t in rows])


def test_every_lesson_has_a_row_on_the_cheat_sheet():
    lessons = {p.stem for p in (ROOT / "solutions").glob("*.ipynb")}
    assert lessons <= {t.lesson for t in TECHNIQUES}
