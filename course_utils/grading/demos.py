"""`course grade --checks-only`: leave out the demo cells that no check depends on.

Most of a graded run is a notebook's demos (sweeps, plots, ablations), not its checks. Authors
tag such cells `demo` in solutions/ (like papermill's `parameters` tag). The grader never
trusts a submission's tags: a submission cell is a demo only if its source is exactly that of
a tagged solution cell. And a demo is skipped only if no later cell that runs reads a name the
demo binds or mutates (assignment, import, def, `x.attr = ...`, `x[i] = ...`), so a learner's
own cell that uses a demo's result keeps that demo (and, in turn, whatever it needs).
Side effects through calls (a seed drawn, a file written) are not seen: tests/test_demos.py
runs the tagged notebooks both ways to show the verdicts do not move.
"""

from __future__ import annotations

import ast
import re

from ..parsing import parse

DEMO_TAG = "demo"
SKIPPED = "# [course-grade] demo cell skipped by `course grade --checks-only`; it runs in your own notebook"
_MAGIC_NAME = re.compile(r"[{$]([A-Za-z_]\w*)")


def is_demo(cell) -> bool:
    return cell.cell_type == "code" and DEMO_TAG in cell.metadata.get("tags", [])


def _python(source: str) -> str:
    """The cell as Python: IPython magics become calls (what the kernel runs)."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager
    except ImportError:  # pragma: no cover - IPython comes with the [tools] extra
        return source
    return TransformerManager().transform_cell(source)


def _base_name(node: ast.AST) -> str | None:
    while isinstance(node, ast.Attribute | ast.Subscript | ast.Starred):
        node = node.value
    return node.id if isinstance(node, ast.Name) else None


def names(source: str) -> tuple[set[str], set[str]]:
    """(names the cell binds or mutates, names it reads). A cell that does not parse runs
    nothing (the kernel raises SyntaxError before any of it runs), so it reads nothing."""
    try:
        tree = parse(_python(source))
    except SyntaxError:
        return set(), set()
    writes: set[str] = set()
    reads: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (writes if isinstance(node.ctx, ast.Store | ast.Del) else reads).add(node.id)
        elif isinstance(node, ast.Attribute | ast.Subscript) and isinstance(
            node.ctx, ast.Store | ast.Del
        ):
            base = _base_name(node)
            if base:
                writes.add(base)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            writes.add(node.name)
        elif isinstance(node, ast.alias):
            writes.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.Global | ast.Nonlocal):
            writes.update(node.names)
    for line in source.splitlines():  # `%%writefile {workdir}/x.py`, `!ls $path`
        if line.lstrip().startswith(("%", "!")):
            reads.update(_MAGIC_NAME.findall(line))
    return writes, reads


def skippable(cells: list, demo: list[bool]) -> set[int]:
    """Indices of demo cells that can be left out: walking backwards, a demo is kept when a
    later kept cell reads something it binds or mutates; a kept demo's reads then count."""
    needed: set[str] = set()
    skip: set[int] = set()
    for i in range(len(cells) - 1, -1, -1):
        cell = cells[i]
        if cell.cell_type != "code":
            continue
        writes, reads = names(cell.source)
        if demo[i] and not (writes & needed):
            skip.add(i)
        else:
            needed |= reads
    return skip


def demo_sources(solution) -> set[str]:
    return {c.source.strip() for c in solution.cells if is_demo(c) and c.source.strip()}


def skip_demos(nb, solution) -> tuple[object, int]:
    """`nb` (already restored, so a copy) with its skippable demo cells emptied in place;
    returns it and how many were skipped. Cells stay, so positions and ids do not move."""
    sources = demo_sources(solution)
    demo = [c.cell_type == "code" and c.source.strip() in sources for c in nb.cells]
    skip = skippable(nb.cells, demo)
    for i in skip:
        nb.cells[i].source = SKIPPED
        nb.cells[i].metadata.setdefault("course", {})["skipped"] = DEMO_TAG
    return nb, len(skip)
