"""Find learner code that reaches into the check machinery or forges its results, to say so.

Nothing here decides a grade: every check is decided by the judge outside the learner's
sandbox (judge.py), so a forged result or a rewritten harness changes only what the notebook
shows. A submission whose own cells name the result's mimetype, assign to (or setattr on) the
course harness, IPython, ipykernel or builtins, or reach into the kernel's display machinery
gets a note in its feedback naming the cell and line, for the instructor's eyes. It sees plain
code only (an exec of an encoded string is not seen), which is all a note needs.
"""

from __future__ import annotations

import ast

from ..parsing import parse
from ..protocol import MIME
from .demos import _python

GUARDED = ("course_utils", "IPython", "ipykernel", "jupyter_client", "builtins", "comm")
INTERNALS = {  # what no exercise needs, and what each reaches
    "display_pub": "the kernel's display machinery",
    "iopub_socket": "the kernel's display machinery",
    "send_response": "the kernel's display machinery",
    "__code__": "a function's compiled code",
    "settrace": "a tracer that can change the check's variables",
    "setprofile": "a tracer that can change the check's variables",
}


def _module_aliases(tree: ast.AST) -> set[str]:
    """Names bound to a guarded module (or a name from one) by the cell's imports."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] in GUARDED:
                    names.add((a.asname or a.name).split(".")[0])
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in GUARDED:
            names.update(a.asname or a.name for a in node.names)
    return names


def _root(node: ast.AST) -> str | None:
    while isinstance(node, ast.Attribute | ast.Subscript | ast.Call):
        node = node.value if not isinstance(node, ast.Call) else node.func
    return node.id if isinstance(node, ast.Name) else None


def _defines_a_check(func: ast.AST, guarded: set[str]) -> bool:
    """`check(...)` imported from course_utils.checks, or `cu.checks.check(...)`."""
    if isinstance(func, ast.Name):
        return func.id == "check" and func.id in guarded
    return isinstance(func, ast.Attribute) and func.attr == "check" and _root(func) in guarded


def findings(source: str, guarded: set[str]) -> list[str]:
    """What in one cell rewrites the check machinery or forges a result, line by line."""
    found = []
    for number, line in enumerate(source.splitlines(), 1):
        if "vnd.course-check" in line or "course-check+json" in line:
            found.append(f"line {number} names the check result's mimetype ({MIME})")
        for name, what in INTERNALS.items():
            if name in line:
                found.append(f"line {number} reaches into {what} ({name})")
    try:
        tree = parse(_python(source))
    except SyntaxError:
        return found
    guarded = guarded | _module_aliases(tree) | {"get_ipython", "sys"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _defines_a_check(node.func, guarded):
            found.append(
                f"line {node.lineno} defines a check with course_utils.checks.check: checks "
                "come from the course"
            )
        targets = []
        if isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign | ast.Delete):
            targets = node.targets if isinstance(node, ast.Assign | ast.Delete) else [node.target]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            if node.func.id in ("setattr", "delattr") and node.args:
                targets = [ast.Attribute(value=node.args[0], attr="?")]
        for target in targets:
            root = _root(target)
            if isinstance(target, ast.Attribute | ast.Subscript) and root in guarded:
                if root == "sys" and "modules" not in ast.unparse(target):
                    continue
                found.append(
                    f"line {node.lineno} rewrites `{ast.unparse(target).removesuffix('.?')}`,"
                    " part of the course harness or the notebook's display"
                )
    return found


def _aliases(source: str) -> set[str]:
    try:
        return _module_aliases(parse(_python(source)))
    except SyntaxError:
        return set()


def suspicious_cells(nb, solution) -> list[str]:
    """Findings in the submission's code cells that are not the solution's own cells (whose
    imports, e.g. `import course_utils as cu`, still name what is guarded)."""
    own = {c.source.strip() for c in solution.cells if c.cell_type == "code"}
    code = [(i, c.source) for i, c in enumerate(nb.cells) if c.cell_type == "code"]
    guarded = set().union(*(_aliases(source) for _, source in code))
    return [
        f"cell {i + 1}: {finding}"
        for i, source in code
        if source.strip() not in own
        for finding in findings(source, guarded)
    ]
