"""The harness a grading kernel imports: the learner edition, with no answer in it.

The learner's code runs in the grading kernel, so nothing there may compute an exercise's
answer: this is `course release`'s copy of course_utils (reference answers withheld, the
grader and solution scripts left out), and further

- every check's body is gone (`@check` stubs remain; under the grader they ask the judge,
  course_utils.judged), with the private helpers only those bodies used;
- the lesson's answers under other names are withheld too: each lesson package lists them in
  `ANSWERS_ELSEWHERE` ("module:name" of a harness function that computes an exercise's answer,
  e.g. `course_utils.memory:activation_bytes` for 00-activation-bytes).

It is built once per grading process and lesson, in a fresh temporary folder (nothing a
submission could have written), compiled, and mounted read-only in the sandbox.
"""

from __future__ import annotations

import ast
import atexit
import compileall
import functools
import os
import py_compile
import shutil
import tempfile
import threading
from pathlib import Path

from ..parsing import parse
from ..release import copy_package
from ..withholding import PACKAGE, answers_elsewhere, by_module, withhold

STUB_BODY = "raise RuntimeError('decided by the judge: see course_utils.judged')"


def _is_check(node: ast.stmt) -> bool:
    def named_check(d: ast.expr) -> bool:
        func = d.func if isinstance(d, ast.Call) else d
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        return name == "check"

    return isinstance(node, ast.FunctionDef) and any(map(named_check, node.decorator_list))


def _check_id(node: ast.FunctionDef) -> str | None:
    for d in node.decorator_list:
        if isinstance(d, ast.Call) and d.args and isinstance(d.args[0], ast.Constant):
            return str(d.args[0].value)
    return None


def strip_check_bodies(source: str, keep: frozenset[str] = frozenset()) -> str:
    """`source` with the body of every @check function replaced by a stub (but the checks whose
    id is in `keep`), and the private helpers only those bodies used removed."""
    from ..withholding import _orphans

    tree = parse(source)
    checks = [n for n in tree.body if _is_check(n) and _check_id(n) not in keep]
    if not checks:
        return source
    lines = source.splitlines(keepends=True)
    spans: dict[tuple[int, int], str] = {}
    for node in checks:
        first, last = node.body[0].lineno - 1, node.end_lineno
        indent = " " * node.body[0].col_offset
        spans[first, last] = f"{indent}{STUB_BODY}\n"
    stubbed = _replace(lines, spans)
    tree = parse(stubbed)
    orphans = _orphans(tree, set())
    if not orphans:
        return stubbed
    lines = stubbed.splitlines(keepends=True)
    return _replace(lines, {(_first_line(n), n.end_lineno): "" for n in orphans})


def _first_line(node: ast.stmt) -> int:
    return min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))]) - 1


def _replace(lines: list[str], spans: dict[tuple[int, int], str]) -> str:
    for (start, end), text in sorted(spans.items(), reverse=True):
        lines[start:end] = [text]
    return "".join(lines)


def _withhold_names(path: Path, module: str, names: set[str]) -> None:
    """Withhold the top-level functions or classes `names` of the module at `path`, as
    `course release` withholds references."""
    source = path.read_text(encoding="utf-8")
    why = "computes an answer of this lesson's exercises, so the grading kernel leaves it out"
    text, _ = withhold(source, module, lambda name: name in names, why)
    path.write_text(text, encoding="utf-8")


def build(lesson_package: str | None, out: Path, package: Path = PACKAGE) -> Path:
    """Write the kernel's harness for `lesson_package` under `out`; return the folder to put
    on the kernel's PYTHONPATH (it holds `course_utils`)."""
    from ..checks import LEGACY

    copy_package(out, package)
    root = out / "course_utils"
    keep = frozenset(LEGACY)
    for path in sorted(root.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if "check(" in text:
            path.write_text(strip_check_bodies(text, keep), encoding="utf-8")
    elsewhere = by_module(answers_elsewhere(lesson_package) if lesson_package else [])
    for module, names in elsewhere.items():
        path = root.joinpath(*module.split(".")[1:]).with_suffix(".py")
        if not path.exists():
            path = root.joinpath(*module.split(".")[1:], "__init__.py")
        _withhold_names(path, module, names)
    compileall.compile_dir(
        str(root), quiet=1, invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH
    )
    for folder, _dirs, files in os.walk(out):
        os.chmod(folder, 0o755)
        for name in files:
            os.chmod(Path(folder) / name, 0o644)
    return out


# One build at a time: grading with --jobs runs submissions in threads, and CPython 3.11's ast
# module keeps its recursion depth per interpreter, not per thread, so two threads parsing at
# once can fail with "SystemError: AST constructor recursion depth mismatch" (seen in CI).
_BUILDING = threading.Lock()


def for_lesson(lesson_package: str | None) -> Path:
    """The kernel's harness for a lesson, built once per process in a fresh temporary folder
    (removed when the process exits)."""
    with _BUILDING:
        return _built(lesson_package)


@functools.cache
def _built(lesson_package: str | None) -> Path:
    out = Path(tempfile.mkdtemp(prefix="course-kernel-harness-"))
    atexit.register(shutil.rmtree, out, ignore_errors=True)
    return build(lesson_package, out)
