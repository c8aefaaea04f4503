"""What the learner's code may not call while a check runs it: a lesson's reference answers
(`@reference`: ReferenceUsed), readers of a held-out split (`@held_out`: HeldOutUsed, the
call also recorded in case the learner's code catches it), and a harness tool that is the
answer of the exercise being graded (`@lesson_tool`, refused only inside `refusing`: ToolUsed). Demos and the checks themselves use
both freely. `course_utils.checks` wraps every plain function a check is given (`_guard`) and
re-exports `reference` and `held_out`, which lessons import from there."""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable

from .errors import HeldOutUsed, ReferenceUsed, ToolUsed

_learner_depth = 0  # > 0 while a check is running code the learner passed in


def reference(fn: Callable) -> Callable:
    """Mark a lesson's reference answer: usable by demos and by checks, not by the learner's
    function while it is being graded."""

    @functools.wraps(fn)
    def guarded(*args, **kwargs):
        if _learner_depth > 0:
            raise ReferenceUsed(fn.__name__)
        return fn(*args, **kwargs)

    guarded.is_reference = True
    return guarded


held_out_reads: list[str] = []  # held-out readers the learner's code called (kept if caught)


def held_out(fn: Callable) -> Callable:
    """Mark a function that reads a held-out split: checks may use it to judge a model, the
    learner's function may not while it is being graded (raises HeldOutUsed, and the call is
    recorded in `held_out_reads` in case the learner's code catches the exception)."""

    @functools.wraps(fn)
    def guarded(*args, **kwargs):
        if _learner_depth > 0:
            held_out_reads.append(fn.__name__)
            raise HeldOutUsed(fn.__name__)
        return fn(*args, **kwargs)

    return guarded


_refused: dict[str, str] = {}  # lesson tools refused now: name -> what the tool is


def lesson_tool(fn: Callable) -> Callable:
    """Mark a harness tool that is also an exercise's answer (lesson 00 builds the timer that
    cu.time_fn is): the probe of that exercise refuses it to the learner's code (`refusing`);
    every other check, demo and lesson uses it freely."""

    @functools.wraps(fn)
    def guarded(*args, **kwargs):
        if _learner_depth > 0 and fn.__name__ in _refused:
            raise ToolUsed(fn.__name__, _refused[fn.__name__])
        return fn(*args, **kwargs)

    return guarded


@contextlib.contextmanager
def refusing(**tools: str):
    """Inside: each lesson tool named (name="what it is") raises ToolUsed when the learner's
    code calls it."""
    _refused.update(tools)
    try:
        yield
    finally:
        for name in tools:
            _refused.pop(name, None)


def _as_learner(fn: Callable) -> Callable:
    """`fn` marked as the learner's code for as long as each call runs."""

    @functools.wraps(fn)
    def call(*args, **kwargs):
        global _learner_depth
        _learner_depth += 1
        try:
            return fn(*args, **kwargs)
        finally:
            _learner_depth -= 1

    return call


def _guard(arg):
    plain = inspect.isfunction(arg) or inspect.ismethod(arg) or isinstance(arg, functools.partial)
    return _as_learner(arg) if plain and not getattr(arg, "is_reference", False) else arg
