"""Rewriting the harness's source without its answers: each reference answer (and each name a
lesson lists in `ANSWERS_ELSEWHERE`) becomes `name = withheld("name")`, and the private helpers
only those answers used go with them. `course release` applies it to the learner edition, the
grader's kernel harness (course_utils/grading/kernel_harness.py) to each lesson's copy.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Iterable
from pathlib import Path

from .parsing import parse

PACKAGE = Path(__file__).resolve().parent
KEPT = frozenset({"ReferenceLAMB"})  # notebook 02b's comparison optimizer, not an exercise's answer
ANSWERS_UNPREFIXED = frozenset({"exact_break_even"})  # answers not named reference_*
WITHHELD_NOTE = "a reference answer, left out of the learner edition"


def answers_elsewhere(lesson_package: str, package: Path = PACKAGE) -> list[str]:
    """The lesson's `ANSWERS_ELSEWHERE` ("module:name" of a harness function that computes one
    of its exercises' answers under another name), read without importing the lesson."""
    init = package / "lessons" / lesson_package / "__init__.py"
    if not init.exists():
        return []
    for node in parse(init.read_text(encoding="utf-8")).body:
        targets = node.targets if isinstance(node, ast.Assign) else []
        if isinstance(node, ast.AnnAssign) and node.value is not None:
            targets = [node.target]  # ANSWERS_ELSEWHERE: tuple[str, ...] = (...)
        if any(isinstance(t, ast.Name) and t.id == "ANSWERS_ELSEWHERE" for t in targets):
            return [str(v) for v in ast.literal_eval(node.value)]
    return []


def by_module(entries: Iterable[str]) -> dict[str, set[str]]:
    """{"course_utils.x": {names}} of "module:name" entries."""
    grouped: dict[str, set[str]] = {}
    for entry in entries:
        module, _, name = entry.partition(":")
        grouped.setdefault(module, set()).add(name)
    return grouped


def every_answer_elsewhere(package: Path = PACKAGE) -> dict[str, list[str]]:
    """{lesson package: its ANSWERS_ELSEWHERE} for every lesson: a learner has every lesson at
    once, so the edition withholds them all (the grading kernel, its own lesson's only)."""
    lessons = sorted(p.parent.name for p in (package / "lessons").glob("*/__init__.py"))
    return {lesson: answers_elsewhere(lesson, package) for lesson in lessons}


def is_answer(name: str) -> bool:
    """Whether a top-level function or class of a lesson is a reference answer to withhold."""
    named = name.startswith(("reference_", "Reference")) or name in ANSWERS_UNPREFIXED
    return named and name not in KEPT


def withhold(
    source: str, module: str, answer: Callable[[str], bool] = is_answer, why: str = ""
) -> tuple[str, list[str]]:
    """`source` with each top-level answer (a function or class whose name `answer` accepts)
    replaced by `name = withheld("name")` (with `why`, when given, as the placeholder's
    reason), and the private helpers only those answers used removed; returns it and the
    names withheld."""
    tree = parse(source)
    lines = source.splitlines(keepends=True)
    answers = [
        n
        for n in tree.body
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and answer(n.name)
    ]
    if not answers:
        return source, []
    call = (
        (lambda name: f'withheld("{name}", {why!r})')
        if why
        else (lambda name: f'withheld("{name}")')
    )
    spans = {_span(n): f"{n.name} = {call(n.name)}  # {WITHHELD_NOTE}\n" for n in answers}
    spans |= {_span(n): "" for n in _orphans(tree, {n.name for n in answers})}
    for (start, end), text in sorted(spans.items(), reverse=True):
        lines[start:end] = [text]
    level = module.count(".")  # course_utils.lessons.x.reference -> from ...answers
    at = _after_future_import(tree)
    lines.insert(at, f"\nfrom {'.' * level}answers import withheld\n")
    text = re.sub(r"\n{4,}", "\n\n\n", "".join(lines)).rstrip("\n") + "\n"
    return text, [n.name for n in answers]


def _span(node: ast.stmt) -> tuple[int, int]:
    first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
    return first - 1, node.end_lineno


def _orphans(tree: ast.Module, removed: set[str]) -> list[ast.stmt]:
    """Private top-level functions, classes and constants (`_NAME = ...`) that nothing left in
    the module uses."""
    defs = {name: n for n in tree.body if (name := _defined(n))}
    gone = set(removed)
    while True:
        used = set()
        for name, node in defs.items():
            if name not in gone:
                used |= _names_used(node) - {name}
        used |= {n for stmt in tree.body if not _defined(stmt) for n in _names_used(stmt)}
        orphans = {n for n in defs if _private(n) and n not in gone and n not in used}
        if not orphans:
            return [defs[n] for n in sorted(gone - removed) if n in defs]
        gone |= orphans


def _private(name: str) -> bool:
    """`_name`, not a module's own `__dunder__` (a module `__getattr__` is used by name)."""
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _defined(node: ast.stmt) -> str | None:
    """The one name a top-level definition binds: a function, a class, or a constant
    (`_NAME = ...`, `_NAME: T = ...`)."""
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return node.name
    targets = node.targets if isinstance(node, ast.Assign) else []
    if isinstance(node, ast.AnnAssign) and node.value is not None:
        targets = [node.target]
    if len(targets) == 1 and isinstance(targets[0], ast.Name):
        return targets[0].id
    return None


_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _names_used(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)} | {
        n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)
    }


def _after_future_import(tree: ast.Module) -> int:
    """The line index after the docstring and `from __future__` imports."""
    at = 0
    for stmt in tree.body:
        docstring = isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)
        future = isinstance(stmt, ast.ImportFrom) and stmt.module == "__future__"
        if not (docstring or future):
            break
        at = stmt.end_lineno
    return at
