"""Is the harness in this process still the one on disk? Asked by the grading kernel before
and after each probe (course_utils.judged), so that a probe's readings are not taken from
instruments the learner's code replaced.

Some checks read instruments beside the learner's code (a spy's counters, a saved-tensor hook,
tracemalloc; the README's table lists them). A notebook can rebind what those instruments
call: `probes.shares_memory = lambda t, a: True`, a replaced entry of `probes.PROBES`, a
method of a spy class, `torch.is_anomaly_enabled`. Each such rebinding leaves a mark this
module reads against ground truth the learner cannot write (the harness's files, mounted
read-only in the sandbox):

- a name a harness module defines with `def` or `class` must still be that object: a
  function compiled from that file (through any `__wrapped__`), not a builtin;
- a name it imports from another harness module must be that module's object, and a module
  it imports the module itself;
- each class's methods are still functions compiled from that file;
- every registered probe is its module's function of that name;
- the functions of torch, numpy and the clocks that instruments call hold no code compiled
  outside an installed file (a notebook cell's code lives in ipykernel's temporary folder).

It is a tripwire, not a wall: code that rewrites this module as well, or compiles its
replacement under an installed file's name, is not seen here (grading/tamper.py names such
code in the instructor's feedback, and the sandbox keeps it from outliving the submission).
"""

from __future__ import annotations

import ast
import functools
import site
import sys
import sysconfig
import types
from pathlib import Path

from .parsing import parse

_HARNESS = Path(__file__).resolve().parent
# what instruments call, beside the harness: module attributes and classes' methods
EXTERNAL_MODULES = ("torch", "torch.autograd", "torch.autograd.graph", "torch.nn.functional",
                    "torch.nn.utils", "torch.utils.checkpoint", "numpy", "tracemalloc", "time",
                    "gc", "threading")  # fmt: skip
EXTERNAL_CLASSES = (("torch", "Tensor"), ("torch.nn", "Module"), ("torch.optim", "Optimizer"))


@functools.cache
def _installed_roots() -> tuple[str, ...]:
    roots = {str(_HARNESS.parent), sys.prefix, sys.base_prefix, sys.exec_prefix}
    roots.update(sysconfig.get_paths().values())
    roots.update(site.getsitepackages() if hasattr(site, "getsitepackages") else ())
    return tuple(sorted(str(Path(r).resolve()) for r in roots if r))


def _unwrapped_files(obj) -> set[str]:
    """Every file along `obj`'s chain of wrappers (a decorator's wrapper lives elsewhere)."""
    files = set()
    for _ in range(20):
        code = getattr(obj, "__code__", None)
        if isinstance(code, types.CodeType):
            files.add(_resolved(code.co_filename))
        if isinstance(obj, property):
            obj = obj.fget
        elif isinstance(obj, functools.partial | functools.cached_property):
            obj = obj.func
        else:
            obj = getattr(obj, "__wrapped__", None) or getattr(obj, "__func__", None)
        if obj is None:
            break
    return files


@functools.cache
def _resolved(filename: str) -> str:
    return filename if filename.startswith("<") else str(Path(filename).resolve())


@functools.cache
def _outside(filename: str) -> bool:
    """Compiled from no installed file: a notebook cell, an exec'd string."""
    path = _resolved(filename)
    return path.startswith("<") or not any(
        path == r or path.startswith(r + "/") for r in _installed_roots()
    )


@functools.cache
def _layout(path: str, package: str) -> tuple[dict, dict, dict]:
    """What a harness file binds at its top level: defined names, names imported from
    modules ({name: (absolute module, attribute or None)}; `package` resolves `from .x`), and
    each class's method names."""
    tree = parse(Path(path).read_text())
    defined, imported, methods = {}, {}, {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            defined[node.name] = node.lineno
        if isinstance(node, ast.ClassDef):
            methods[node.name] = {
                n.name for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
            }
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    imported[a.asname] = (a.name, None)
        if isinstance(node, ast.ImportFrom) and (node.module or node.level):
            source = node.module
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            for a in node.names:
                imported[a.asname or a.name] = (source, a.name)
    return defined, imported, methods


def _harness_modules() -> list[types.ModuleType]:
    out = []
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if name.split(".")[0] == _HARNESS.name and file and file.endswith(".py"):
            out.append(module)
    return out


def _expected_import(source: str, attribute: str | None):
    module = sys.modules.get(source)
    if module is None:
        return None  # not imported in this process: nothing to compare with
    if attribute is None:
        return module
    if hasattr(module, attribute):
        return getattr(module, attribute)
    return sys.modules.get(f"{source}.{attribute}")


def _replaced(value, module_name: str, path: str) -> bool:
    """Is `value`, bound to a name `path` defines, something else than what it defines?"""
    if isinstance(value, type):
        return value.__module__ != module_name
    if not callable(value):
        return False  # calling it fails: nothing read from it
    files = _unwrapped_files(value)
    if files:
        return path not in files
    if isinstance(value, types.BuiltinFunctionType):
        return True
    return any(_outside(f) for f in _unwrapped_files(type(value).__call__))  # an object of ours


def _module_changes(module: types.ModuleType) -> list[str]:
    path = _resolved(module.__file__)
    package = module.__name__ if path.endswith("__init__.py") else module.__spec__.parent
    defined, imported, methods = _layout(path, package)
    here, found = vars(module), []
    for name in defined:
        if name in here and _replaced(here[name], module.__name__, path):
            found.append(f"{module.__name__}.{name}")
    for name, (source, attribute) in imported.items():
        if name in here and source.split(".")[0] in (_HARNESS.name, *_external_roots()):
            expected = _expected_import(source, attribute)
            if expected is not None and here[name] is not expected:
                found.append(f"{module.__name__}.{name}")
    for cls_name, names in methods.items():
        cls = here.get(cls_name)
        for name in names if isinstance(cls, type) else ():
            value = cls.__dict__.get(name)
            if value is not None and path not in _unwrapped_files(value):
                found.append(f"{module.__name__}.{cls_name}.{name}")
    return found


@functools.cache
def _external_roots() -> tuple[str, ...]:
    return tuple({name.split(".")[0] for name in EXTERNAL_MODULES})


def _probe_changes() -> list[str]:
    from .probes import PROBES

    found = []
    for name, fn in list(PROBES.items()):
        module_name, _, qualname = name.partition(":")
        module = sys.modules.get(module_name)
        if module is not None and getattr(module, qualname, None) is not fn:
            found.append(f"course_utils.probes.PROBES[{name!r}]")
    return found


def _external_changes() -> list[str]:
    found = []
    for name in EXTERNAL_MODULES:
        module = sys.modules.get(name)
        for attribute, value in list(vars(module).items()) if module else ():
            if isinstance(value, types.FunctionType) and _outside(value.__code__.co_filename):
                found.append(f"{name}.{attribute}")
    for module_name, cls_name in EXTERNAL_CLASSES:
        cls = getattr(sys.modules.get(module_name), cls_name, None)
        for attribute, value in list(vars(cls).items()) if isinstance(cls, type) else ():
            if any(_outside(f) for f in _unwrapped_files(value)):
                found.append(f"{module_name}.{cls_name}.{attribute}")
    return found


_VERIFIED: dict[str, tuple] = {}  # module name -> what it bound when last found unchanged


def _bindings(module: types.ModuleType) -> tuple:
    here = vars(module)
    return tuple(map(id, here.values())) + tuple(
        id(v) for c in here.values() if isinstance(c, type) for v in vars(c).values()
    )


def changed() -> list[str]:
    """The harness names (and the functions of torch, numpy and the clocks) that code from
    outside the installed files rebound in this process; empty when none was. A module whose
    bindings are those it had when last found unchanged is not read again."""
    found = _probe_changes() + _external_changes()
    for module in _harness_modules():
        now = _bindings(module)
        if _VERIFIED.get(module.__name__) == now:
            continue
        changes = _module_changes(module)
        if changes:
            found += changes
        else:
            _VERIFIED[module.__name__] = now
    return sorted(set(found))


class HarnessChanged(Exception):
    """Raised in the grading kernel when a probe would read instruments that were rebound."""

    def __init__(self, names: list[str]):
        shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
        super().__init__(
            f"the course harness in this kernel was changed by the notebook's code ({shown}): "
            "this check reads its instruments there, so it cannot be graded. Restart the kernel "
            "and leave course_utils, torch and numpy's functions as they are"
        )
