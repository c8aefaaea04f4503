"""How a check runs the learner's code: through probes, so that its verdict can be decided where
the learner's code cannot reach.

A check body (course_utils.checks) never calls the learner's function itself. It receives each
function (or class) the check cell passed as an `Answer`, and asks a **probe** to run it:

    @probe
    def saved_bytes_of(saved_bytes, case: str) -> int:       # runs beside the learner's code
        return saved_bytes(activation_cases()[case])

    @check("00-activation-bytes", points=2)
    def check_activation_bytes(saved_bytes):                  # may run in the judge
        got = observe(saved_bytes_of, saved_bytes, "mlp")      # plain data, never an object
        expected = activation_bytes(activation_cases()["mlp"])
        ...

A probe is a module-level function of the learner-visible harness: it builds its specimen
from its arguments (JSON-like values and tensors), calls the answer, and returns what it saw
as plain data (course_utils.wire). In a notebook the probe runs in the same process as the
check (`Local` answers); under `course grade` the check runs in the judge, outside the
learner's sandbox, and each `observe` runs the probe in the learner's kernel (`Remote`
answers, course_utils.judged). Either way what comes back has been through wire.normalise,
so a check sees the same values in both places.

A probe's readings of the harness's own instruments (a timer, a sync counter) are taken in the
learner's process: the README lists which checks rest on them. `observe_timed` times the
probe from the judge's side instead, where the learner's process cannot change the clock.
"""

from __future__ import annotations

import contextlib
import contextvars
import random
import secrets
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import wire
from .errors import CourseError, HeldOutUsed, ReferenceUsed
from .guards import _guard

PROBES: dict[str, Callable] = {}  # "module:qualname" -> the probe
_HARNESS = str(Path(__file__).parent)


def probe(fn: Callable) -> Callable:
    """Register `fn` as a probe: a module-level function run beside the learner's code, whose
    first arguments are answers and whose result is plain data (see the module docstring)."""
    if "<locals>" in fn.__qualname__ or fn.__name__.startswith("_"):
        raise ValueError(
            f"a probe must be a public module-level function (the grading kernel's harness "
            f"drops private helpers its checks alone used), not {fn.__qualname__}"
        )
    name = f"{fn.__module__}:{fn.__qualname__}"
    fn.probe_name = name
    PROBES[name] = fn
    return fn


@probe
def call_with(fn: Callable, *args, **kwargs) -> Any:
    """The answer called on plain arguments: the probe for an answer that is a plain function
    of data (`observe(call_with, double, 3)`)."""
    return fn(*args, **kwargs)


def find_probe(name: str) -> Callable:
    """The probe registered under `name`, importing its module (a course_utils one) if needed."""
    import importlib

    module, _, _ = name.partition(":")
    if name not in PROBES and module.split(".")[0] == "course_utils":
        importlib.import_module(module)
    try:
        return PROBES[name]
    except KeyError:
        raise LookupError(f"no probe named {name!r}") from None


class LearnerRaised(CourseError):
    """Raised in a check when the learner's code (run by a probe) raised an exception: its
    type's name, first line and where in the learner's code; the exception object itself
    never crosses (it could run code when read)."""

    def __init__(self, type_name: str, message: str, where: str = ""):
        self.type_name, self.message, self.where = type_name, message, where
        detail = f": {message}" if message else ""
        super().__init__(f"your code raised {type_name}{detail}{where}")


class SessionLost(CourseError):
    """Raised in a judged check when the learner's kernel stopped answering (interrupted at
    the cell's time limit, dead, or exited) before the check finished."""


class Answer:
    """The learner's function or class as a check holds it: called only through `observe`."""

    def __init__(self, name: str):
        self.__name__ = self.name = name

    def __call__(self, *args, **kwargs):
        raise TypeError(
            f"a check never calls the learner's `{self.name}` itself: run it through a probe "
            "(course_utils.probes.observe)"
        )

    def __repr__(self) -> str:
        return f"<answer {self.name}>"


class Local(Answer):
    """An answer in this very process (a notebook's own check, the tests)."""

    def __init__(self, obj: Any):
        super().__init__(getattr(obj, "__name__", type(obj).__name__))
        self.obj = obj


class Remote(Answer):
    """An answer that lives in the learner's kernel, reached over a judge session."""

    def __init__(self, name: str, index: int, session: Any):
        super().__init__(name)
        self.index, self.session = index, session


def is_answer(obj: Any) -> bool:
    return isinstance(obj, Answer)


def learner_frame(exc: BaseException) -> str:
    """'(in your code, line N: `...`)' for the innermost frame outside the harness and
    libraries, or ''."""
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        name = frame.filename
        if (
            not name.startswith(_HARNESS)
            and "site-packages" not in name
            and "/lib/python" not in name
        ):
            return f" (in your code, line {frame.lineno}: `{(frame.line or '').strip()}`)"
    return ""


def raised(exc: BaseException) -> dict:
    """What the judge is told of an exception the learner's code raised."""
    lines = str(exc).strip().splitlines()
    return {
        "type": type(exc).__name__,
        "message": lines[0][:500] if lines else "",
        "where": learner_frame(exc),
    }


def run_locally(fn: Callable, args: tuple, kwargs: dict) -> Any:
    """Run probe `fn` with its answers resolved to the learner's objects, each guarded as the
    learner's code (a reference called from one raises ReferenceUsed; a reference passed as
    the answer, as the tests and selftest do, runs as itself); the result as plain data."""
    args = tuple(_guard(a.obj) if isinstance(a, Local) else a for a in args)
    kwargs = {k: _guard(v.obj) if isinstance(v, Local) else v for k, v in kwargs.items()}
    return wire.normalise(fn(*args, **kwargs))


def _check_probe(fn: Callable) -> str:
    name = getattr(fn, "probe_name", None)
    if name is None or PROBES.get(name) is not fn:
        raise TypeError(f"{getattr(fn, '__qualname__', fn)!r} is not a registered @probe")
    return name


def observe(fn: Callable, *args, **kwargs) -> Any:
    """Run probe `fn` on the learner's answer(s) among `args`, wherever they live; return
    what it returned as plain data. The learner's exceptions arrive as LearnerRaised, but
    NotImplementedError (not attempted) and ReferenceUsed (in a notebook, where references
    exist) keep their type, so the check decides as before."""
    name = _check_probe(fn)
    given = [a for a in (*args, *kwargs.values()) if isinstance(a, Answer)]
    if not given:  # it would run here, in the judge, and see no learner code
        raise TypeError(f"observe({fn.__name__}, ...) was given no answer to run")
    remote = [a for a in given if isinstance(a, Remote)]
    if remote:
        return remote[0].session.observe(name, args, kwargs)
    try:
        return run_locally(fn, args, kwargs)
    except (NotImplementedError, ReferenceUsed, HeldOutUsed):
        raise
    except Exception as exc:  # the learner's, as the judge would report it
        told = raised(exc)
        raise LearnerRaised(told["type"], told["message"], told["where"]) from exc


def observe_timed(fn: Callable, *args, **kwargs) -> tuple[Any, float]:
    """`observe`, and the seconds it took as the check's own clock saw it: from the judge, a
    round trip to the learner's kernel that the learner's code cannot speed up by changing
    its clock (it costs a little more than the work: a message each way)."""
    start = time.perf_counter()
    value = observe(fn, *args, **kwargs)
    return value, time.perf_counter() - start


_SPECIMEN_SEED = contextvars.ContextVar("specimen_seed", default=None)


class _FirstChoice(random.Random):
    """A notebook's draws: always the first option, the specimen the thresholds' evidence and
    the red team's cases were measured on."""

    def choice(self, seq):
        return seq[0]


def specimen_rng() -> random.Random:
    """Where a check may vary its specimens (a batch size, a layer's width), it draws them from
    this with `choice`, listing the measured specimen first: in a notebook every draw is that
    first option; each time the judge grades (judge_draws) the draws are fresh, so an answer
    copied from another run's feedback does not fit."""
    seed = _SPECIMEN_SEED.get()
    return _FirstChoice(0) if seed is None else random.Random(seed)


@contextlib.contextmanager
def judge_draws():
    """Inside: specimen_rng() starts from a seed no submission can know in advance."""
    token = _SPECIMEN_SEED.set(secrets.randbits(31))
    try:
        yield
    finally:
        _SPECIMEN_SEED.reset(token)


def answers(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """A check cell's arguments as its body receives them in a notebook: each callable (a
    function, a class, a model) as a Local answer, every other value as plain data."""

    def one(value: Any) -> Any:
        return Local(value) if callable(value) else wire.normalise(value)

    return tuple(one(a) for a in args), {k: one(v) for k, v in kwargs.items()}
