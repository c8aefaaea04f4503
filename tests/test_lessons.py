"""Contracts that hold across lessons: every locked check cell has exactly one registered
check behind it, and lessons stay independent of each other."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import pkgutil
import re
from pathlib import Path

import course_utils.lessons
from course_utils.authoring import (
    check_cells,
    check_marker_line,
    has_solution,
    read,
    strip_solution,
)
from course_utils.checks import REGISTRY

ROOT = Path(__file__).resolve().parents[1]
LESSONS = Path(course_utils.lessons.__file__).parent


def lesson_names() -> list[str]:
    return [m.name for m in pkgutil.iter_modules([str(LESSONS)])]


def test_every_grade_id_in_solutions_maps_to_exactly_one_registered_check():
    for name in lesson_names():
        importlib.import_module(f"course_utils.lessons.{name}")
    ids = []
    for path in sorted((ROOT / "solutions").glob("*.ipynb")):
        ids += list(check_cells(read(path), path.stem))
    assert ids, "no check cells found in solutions/"
    assert len(ids) == len(set(ids)), "a grade_id is used by two notebooks"
    unknown = [i for i in ids if i not in REGISTRY]
    assert not unknown, f"check cells with no registered check: {unknown}"
    orphans = [i for i in REGISTRY if i[:2].isdigit() and i not in ids]
    assert not orphans, f"registered checks no notebook uses: {orphans}"


def test_every_check_cell_shows_the_points_its_check_awards():
    """Grading awards the points of `@check`; the locked cell's marker line and nbgrader
    metadata show the learner a number: they must be the same one."""
    for name in lesson_names():
        importlib.import_module(f"course_utils.lessons.{name}")
    shown = {}
    for path in sorted((ROOT / "solutions").glob("*.ipynb")):
        for grade_id, (_, cell) in check_cells(read(path), path.stem).items():
            line = cell.source.splitlines()[0]
            meta = cell.metadata.get("nbgrader", {}).get("points")
            shown[grade_id] = (line, meta)
    wrong = {
        grade_id: (line, meta, REGISTRY[grade_id].points)
        for grade_id, (line, meta) in shown.items()
        if grade_id in REGISTRY
        and (
            line != check_marker_line(grade_id, REGISTRY[grade_id].points)
            or (meta is not None and meta != REGISTRY[grade_id].points)
        )
    }
    assert not wrong, f"check cells whose shown points differ from the check's: {wrong}"


def test_every_lesson_helper_a_solution_uses_is_named_in_the_learner_copy():
    """A reference answer may lean on a lesson helper (`lesson.feeds_bn`) only if the learner
    copy says it exists: otherwise the solution uses something the learner was never shown."""
    hidden = {}
    for path in sorted((ROOT / "solutions").glob("*.ipynb")):
        used, shown = set(), []
        for cell in read(path).cells:
            text = strip_solution(cell.source) if has_solution(cell) else cell.source
            if has_solution(cell):
                used |= set(re.findall(r"lesson\.(\w+)", cell.source))
            shown.append(text)
        learner = "\n".join(shown)
        missing = sorted(u for u in used if f"lesson.{u}" not in learner)
        if missing:
            hidden[path.stem] = missing
    assert not hidden, f"lesson helpers only the solutions name: {hidden}"


def imported_modules(file: Path) -> set[str]:
    """Absolute names of the modules `file` imports (`from x import y` counts x and x.y)."""
    rel = file.relative_to(LESSONS.parent.parent).with_suffix("")
    package = ".".join(rel.parts[:-1])
    found = set()
    for node in ast.walk(ast.parse(file.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                module = importlib.util.resolve_name("." * node.level + module, package)
            found.add(module)
            found |= {f"{module}.{a.name}" for a in node.names}
    return found


def test_no_lesson_imports_another_lesson():
    offenders = []
    for name in lesson_names():
        path = LESSONS / name
        files = list(path.rglob("*.py")) if path.is_dir() else [LESSONS / f"{name}.py"]
        for file in files:
            for module in imported_modules(file):
                parts = module.split(".")
                if parts[:2] == ["course_utils", "lessons"] and len(parts) > 2:
                    if parts[2] != name and parts[2] in lesson_names():
                        offenders.append(f"{file.relative_to(ROOT)} imports lesson {parts[2]}")
    assert not offenders, offenders
