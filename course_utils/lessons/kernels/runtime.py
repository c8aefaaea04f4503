"""Where lesson 17's Triton kernels run: compiled on a CUDA GPU, or on the CPU through Triton's
interpreter, or nowhere (Triton not installed), said in one line.

Triton 3.8 reads `TRITON_INTERPRET` each time `@triton.jit` decorates a function
(triton/runtime/jit.py: `knobs.runtime.interpret`), and that includes its own library of jitted
functions (`tl.max`, `tl.sum`, ...) when `triton.language` is first imported. `cu.setup()`
imports it (through torch._dynamo), so this module sets the variable on import (`prepare`),
before the setup cell's `cu.setup`; where Triton was imported already (a test run, a notebook
run out of order), `prepare` rebuilds that library for the interpreter, and a kernel cell says
how to recover if it could not. Triton ships with PyTorch's Linux
wheels only (https://triton-lang.org/main/getting-started/installation.html): on macOS and
Windows each kernel cell stops with one line saying so (course_utils.skipping), not a traceback.
"""

from __future__ import annotations

import importlib.util
import os
import sys

import torch

from ...errors import ReferenceWithheld

NO_TRITON = (
    "Triton is not installed here: it ships with PyTorch's Linux wheels (and Colab's). On macOS "
    "or Windows run this notebook on Colab or in WSL2/Linux; the sections without kernels still "
    "run"
)


NOT_INTERPRETED = (
    "Triton was imported before TRITON_INTERPRET=1 was set, so its own library (tl.max, tl.sum) "
    "cannot run in the interpreter: restart the kernel and run the notebook from the top (the "
    "setup cell imports the lesson before anything imports Triton)"
)


class TritonMissing(ReferenceWithheld):
    """Raised when a kernel cell runs where Triton cannot run it (not installed, or imported
    before the interpreter was chosen): like a withheld answer, the cell says why in one line
    and Run All goes on (course_utils.skipping)."""

    def __init__(self, why: str = NO_TRITON) -> None:
        super().__init__("triton", why)


def have_triton() -> bool:
    return importlib.util.find_spec("triton") is not None


def interpreted() -> bool:
    """Whether kernels defined from now on run in Triton's interpreter (on the CPU)."""
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


def kernel_device() -> torch.device:
    """Where a kernel's tensors must live: the GPU for compiled kernels, else the CPU."""
    return torch.device("cuda" if torch.cuda.is_available() and not interpreted() else "cpu")


class _Absent:
    """Stands in for `triton` and `triton.language` where Triton cannot run the kernels:
    defining a kernel works (so the cell's other names exist), launching one raises
    TritonMissing saying why."""

    def __init__(self, why: str) -> None:
        self.why = why

    def __getattr__(self, name: str):
        if name == "jit":
            return lambda fn=None, **kw: _Kernel(self.why) if fn else (lambda f: _Kernel(self.why))
        if name == "constexpr":
            return int
        raise TritonMissing(self.why)


class _Kernel:
    def __init__(self, why: str) -> None:
        self.why = why

    def __getitem__(self, grid):
        raise TritonMissing(self.why)

    def __call__(self, *args, **kwargs):
        raise TritonMissing(self.why)


def _interpret_library() -> None:
    """Rebuild triton.language's own jitted functions (tl.max, tl.sum, and their tensor-method
    forms) for the interpreter, as `import triton` would have built them had TRITON_INTERPRET=1
    been set first: torch._dynamo imports Triton whenever it is installed."""
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    rebuilt: dict[int, InterpretedFunction] = {}
    namespaces = [vars(m) for n, m in list(sys.modules.items()) if n.startswith("triton.language")]
    for namespace in [*namespaces, vars(tl.core.tensor)]:
        for name, value in list(namespace.items()):
            if isinstance(value, JITFunction):
                new = rebuilt.setdefault(id(value), InterpretedFunction(value.fn))
                if isinstance(namespace, dict):
                    namespace[name] = new
                else:  # a tensor method: a plain function binds `self`, as Triton's own wrapper
                    setattr(tl.core.tensor, name, lambda *a, _f=new, **k: _f(*a, **k))


def _library_interpreted() -> bool:
    """Whether triton.language's own jitted functions were built for the interpreter."""
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction

    return isinstance(tl.standard.max, InterpretedFunction)


def prepare(strict: bool = True) -> None:
    """Before Triton is imported: with no CUDA GPU set TRITON_INTERPRET=1, so kernels run on
    the CPU. `strict`: raise TritonMissing where Triton is not installed."""
    if not have_triton():
        if strict:
            raise TritonMissing()
        return
    if not torch.cuda.is_available():
        os.environ["TRITON_INTERPRET"] = "1"
        if "triton.language" in sys.modules and not _library_interpreted():
            _interpret_library()


def load_triton():
    """(triton, triton.language) for the notebook's kernel cells, kernels defined from now on
    running where prepare() says; without Triton, stand-ins whose kernels say why they
    cannot run."""
    if not have_triton():
        print(NO_TRITON)
        return _Absent(NO_TRITON), _Absent(NO_TRITON)
    prepare()
    if interpreted() and not _library_interpreted():
        print(NOT_INTERPRETED)
        return _Absent(NOT_INTERPRETED), _Absent(NOT_INTERPRETED)
    import triton
    import triton.language as tl

    where = (
        "the CPU, through Triton's interpreter" if interpreted() else torch.cuda.get_device_name()
    )
    print(f"Triton {triton.__version__}: kernels defined from here run on {where}")
    return triton, tl


# on import of the lesson, which the setup cell does before cu.setup() imports Triton
prepare(strict=False)
