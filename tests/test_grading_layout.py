"""course_utils/grading/: one module per step of a submission's path, engines above them, and
no import circle (each module imports only siblings below it, never the package itself)."""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

GRADING = Path(__file__).resolve().parents[1] / "course_utils" / "grading"


def sibling_imports(path: Path) -> set[str]:
    """The grading modules `path` imports (`from .x import`, `from . import x`), at any depth
    of the file (a lazy import inside a function counts: it can close a circle too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            found |= {node.module} if node.module else {a.name for a in node.names}
    return found


def test_the_grading_package_has_no_import_circle():
    graph = {p.stem: sibling_imports(p) for p in GRADING.glob("*.py")}
    assert all("__init__" not in deps for deps in graph.values())
    try:
        order = list(TopologicalSorter(graph).static_order())
    except CycleError as exc:  # pragma: no cover - the message names the circle
        raise AssertionError(f"import circle: {exc.args[1]}") from None
    # one submission's path comes before the engines that call it
    assert order.index("submission") < min(order.index(e) for e in ("serial", "cluster"))
    assert order.index("__init__") == len(order) - 1


def test_the_harness_keeps_no_grading_module_at_its_top_level():
    top = {p.stem for p in GRADING.parent.glob("*.py")}
    moved = {"cluster", "shards", "outbox", "records", "restore", "isolated", "feedback"}
    assert not top & (moved | {"execute", "demos", "gradescope", "autograder", "grading"})
