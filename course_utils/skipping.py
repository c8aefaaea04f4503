"""Run All in the learner edition: a cell that needs a withheld reference answer says why in
one line and stops there, and the notebook goes on.

`course release` leaves the reference answers out; running one raises ReferenceWithheld.
IPython would show a traceback, and Run All (JupyterLab, Colab, nbclient) stops at a cell
whose reply is an error. `install` gives IPython a handler for it: the cell prints the reason
and its reply is "ok", so Run All goes on. The names the cell had newly bound before it stopped
are removed (a half-made result would mislead the cells below), so a later cell that reads a
name the stopped cell binds raises NameError; for such a name, and only such, the handler does
the same, down the chain. Every other NameError shows its traceback as usual.

The reply is made "ok" by clearing the error IPython has just recorded for the cell
(`displayhook.exec_result`, which IPython >= 5 sets while a cell runs); without it the
handler still prints one line instead of a traceback.
"""

from __future__ import annotations

import ast

from .errors import ReferenceWithheld
from .parsing import parse

SKIPPED = "skipped: "  # how each line the handler prints starts, after its "("
_skipped: set[str] = set()  # names that stopped cells would have bound
_cell = [""]  # the source of the cell running now (IPython's pre_run_cell event)
_before: list[set[str]] = [set()]  # the names defined when it started


def install(shell=None) -> bool:
    """Register the handler in this IPython kernel (False outside IPython). Idempotent."""
    if shell is None:
        try:
            from IPython import get_ipython
        except ImportError:
            return False
        shell = get_ipython()
    if shell is None:
        return False
    shell.set_custom_exc((ReferenceWithheld, NameError), _handle)
    callbacks = shell.events.callbacks["pre_run_cell"]
    if not any(getattr(cb, "__name__", "") == _remember.__name__ for cb in callbacks):
        shell.events.register("pre_run_cell", _remember)
    return True


def _remember(info) -> None:
    _cell[0] = getattr(info, "raw_cell", "") or ""
    from IPython import get_ipython

    shell = get_ipython()
    _before[0] = set(shell.user_ns) if shell is not None else set()


def _handle(shell, etype, value, tb, tb_offset=None):
    if not issubclass(etype, ReferenceWithheld) and getattr(value, "name", None) not in _skipped:
        shell.showtraceback((etype, value, tb), tb_offset=tb_offset, running_compiled_code=True)
        return []
    if issubclass(etype, ReferenceWithheld):
        print(f"({SKIPPED}{value})")
    else:
        print(f"({SKIPPED}`{value.name}` comes from a cell above that was skipped)")
    bound = bound_names(_cell[0])
    for name in bound - _before[0]:
        shell.user_ns.pop(name, None)
    _skipped.update(bound)
    result = getattr(getattr(shell, "displayhook", None), "exec_result", None)
    if result is not None:
        result.error_in_exec = None  # the cell counts as run: Run All goes on
    return []


def bound_names(source: str) -> set[str]:
    """The names a cell binds (assignments, imports, def, class, global): a copy of the writes
    half of `course_utils.grading.demos.names`, which the learner edition does not ship."""
    try:
        from IPython.core.inputtransformer2 import TransformerManager

        source = TransformerManager().transform_cell(source)
    except ImportError:  # pragma: no cover - the kernel runs IPython
        pass
    try:
        tree = parse(source)
    except SyntaxError:
        return set()
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
            bound.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(node.name)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.Global):
            bound.update(node.names)
    return bound
