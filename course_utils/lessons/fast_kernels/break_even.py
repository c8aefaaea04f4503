"""Lesson 05's third check: should this run compile? The learner decides, for a timing and a
run length, whether the compiled run finishes sooner. The scenarios sit on a 2**-20 s grid so
that every right way to decide agrees exactly, and the run lengths sit just below, at and
above the break-even, including a whole-number break-even where the two runs tie."""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

import numpy as np

from ...checks import check, correct, reference
from ...probes import observe
from . import compiling
from .checks import HINTS
from .probes import compile_decisions
from .reference import reference_should_compile

Rule = Callable[[compiling.CompileTiming, int, int], bool]


@reference  # it computes the exercise's answer: demos may print it, graded code may not
def exact_break_even(timing, compiles: int = 1) -> Fraction | float:
    """Exact steps at which the two runs take equally long (math.inf if never): the compile
    cost (first call minus the step it also ran, once per compile) over the gain per step."""
    eager, compiled, first = (
        Fraction(v) for v in (timing.eager_step_s, timing.compiled_step_s, timing.first_call_s)
    )
    return compiles * (first - compiled) / (eager - compiled) if eager > compiled else math.inf


def _faster(x: float, n: int) -> bool:
    return n > x


def _fractions(t) -> tuple[Fraction, Fraction, Fraction]:
    return Fraction(t.first_call_s), Fraction(t.eager_step_s), Fraction(t.compiled_step_s)


def _eager_step_overhead(t, n: int, c: int) -> bool:
    first, eager, compiled = _fractions(t)
    return n * (eager - compiled) > c * (first - eager)


def _rounded(t, n: int, c: int, how: Callable[[Fraction], int]) -> bool:
    return t.eager_step_s > t.compiled_step_s and n > how(exact_break_even(t, c))


# Mistakes a half-understanding learner makes, each as the decision it leads to: a cause is
# named only when one of them reproduces every answer the learner gave.
MISTAKES: dict[str, tuple[str, Rule]] = {
    "tie": (
        "at the break-even the two runs take exactly as long: nothing is gained there, so "
        "compile only when the compiled run is strictly sooner",
        lambda t, n, c: n >= exact_break_even(t, c),
    ),
    "whole-first-call": (
        "the whole first call was counted as compile time; it also ran one step",
        lambda t, n, c: (
            t.eager_step_s > t.compiled_step_s
            and n
            > c
            * Fraction(t.first_call_s)
            / (Fraction(t.eager_step_s) - Fraction(t.compiled_step_s))
        ),
    ),
    "compiles-once": (
        "the compiles (one per shape) were counted once; each one pays again",
        lambda t, n, c: _faster(exact_break_even(t, 1), n),
    ),
    "ratio": (
        "the gain per step is eager - compiled seconds, not their ratio",
        lambda t, n, c: (
            t.eager_step_s > t.compiled_step_s
            and n > c * _cost(t) / (t.eager_step_s / t.compiled_step_s)
        ),
    ),
    "eager-step": (
        "the compile cost is the first call minus the compiled step that call also ran, not "
        "minus an eager step",
        _eager_step_overhead,
    ),
    "no-investment": (
        "a faster step alone does not make compiling pay: the compile cost is repaid only "
        "after enough steps, so a short run stays eager",
        lambda t, n, c: t.eager_step_s > t.compiled_step_s,
    ),
    "rounded": (
        "the break-even was rounded to the nearest step: the first run that is sooner compiled "
        "is the first whole step past it",
        lambda t, n, c: _rounded(t, n, c, round),
    ),
    "rounded-up": (
        "the break-even was rounded up before comparing: the first whole step past it is "
        "already sooner compiled",
        lambda t, n, c: _rounded(t, n, c, math.ceil),
    ),
    "not-faster": (
        "a compiled step that is not faster never pays back, however long the run",
        lambda t, n, c: t.eager_step_s < t.compiled_step_s or _faster(exact_break_even(t, c), n),
    ),
}


def _cost(timing) -> float:
    return timing.first_call_s - timing.compiled_step_s


def _q(seconds: float) -> float:
    """Seconds on a grid of 2**-20 s (about 1 us): sums and products of a few of them are
    exact in float64, so every right way of deciding agrees with exact fractions."""
    return round(seconds * 2**20) / 2**20


def _cost_of(steps: Fraction, eager: float, gain: float) -> compiling.CompileTiming:
    """A timing whose compile cost is exactly `steps` gains (its break-even, on the grid)."""
    compiled = eager - gain
    return compiling.CompileTiming(compiled + float(steps * Fraction(gain)), eager, compiled)


def _scenarios(measured) -> list[tuple[str, compiling.CompileTiming, int]]:
    first, eager = _q(measured.first_call_s), _q(measured.eager_step_s)
    faster = _q(eager / 1.25)
    gain = max(_q(eager / 5), 2**-20)  # a whole-number break-even: the cost is exactly n gains
    n = max(2, round((first - (eager - gain)) / gain))
    gain4 = max(4 * _q(eager / 20), 4 * 2**-20)  # a multiple of 4 grid steps: n + 1/4 is exact
    return [
        (
            "measured here (TorchDynamo only)",
            compiling.CompileTiming(first, eager, _q(measured.compiled_step_s)),
            1,
        ),
        ("your first call, a 1.25x faster step", compiling.CompileTiming(first, eager, faster), 1),
        ("the same, 6 shapes with dynamic=False", compiling.CompileTiming(first, eager, faster), 6),
        (f"a compile cost of exactly {n} steps' gain", _cost_of(Fraction(n), eager, gain), 1),
        # a break-even's fraction on both sides of one half, whatever this machine measured:
        # rounding to the nearest step is one step late on the first, rounding up on both
        (f"a compile cost of {n}.75 steps' gain", _cost_of(n + Fraction(3, 4), eager, gain4), 1),
        (f"a compile cost of {n}.25 steps' gain", _cost_of(n + Fraction(1, 4), eager, gain4), 1),
        ("a compiled step 10% slower", compiling.CompileTiming(first, eager, _q(eager * 1.1)), 1),
        ("a compiled step exactly as fast", compiling.CompileTiming(first, eager, eager), 1),
    ]


def run_lengths(timing, compiles: int) -> list[int]:
    """One step and half the break-even (a faster step alone does not pay yet; one step also
    tells a speed-up ratio, which is not in seconds, from ignoring the run length), just below
    and at the first run length that is sooner compiled, and ten times it; for a timing that
    never pays, a short and a very long run."""
    x = exact_break_even(timing, compiles)
    if math.isinf(x):
        return [10, 10**7]
    first_sooner = math.floor(x) + 1
    lengths = {1, first_sooner // 2, first_sooner - 1, first_sooner, 10 * first_sooner}
    return sorted(lengths - {0})


def _is_bool(x) -> bool:
    return isinstance(x, bool | np.bool_)


def _answer(decided: dict):
    """One answer as the probe reported it: the value returned, or a ZeroDivisionError."""
    return ZeroDivisionError() if decided.get("zero_division") else decided.get("answer")


def _confirmed_cause(answers: list[tuple[object, int, int, object]]) -> str | None:
    """The one mistake that reproduces every True/False the learner gave, if there is one
    (an exception, reported on its own part, is no evidence either way)."""
    given = [(t, n, c, bool(got)) for t, n, c, got in answers if _is_bool(got)]
    if all(got == reference_should_compile(t, n, c) for t, n, c, got in given):
        return None
    matching = [
        why
        for why, rule in MISTAKES.values()
        if all(got == rule(t, n, c) for t, n, c, got in given)
    ]
    return matching[0] if len(matching) == 1 else None


@check(
    "05-break-even",
    points=2,
    hint=HINTS["break_even"],
    in_kernel="whether the learner's function changed the timing it was given is read beside it",
)
def check_break_even(should_compile):
    cases = [(*case, run_lengths(*case[1:])) for case in _scenarios(compiling.dynamo_timing())]
    asked = [
        ([timing.first_call_s, timing.eager_step_s, timing.compiled_step_s], lengths, compiles)
        for _, timing, compiles, lengths in cases
    ]
    decided = observe(compile_decisions, should_compile, asked)
    if len(decided) != len(cases) or any(
        len(said) != len(lengths) for said, (*_, lengths) in zip(decided, cases, strict=False)
    ):
        raise ValueError("one answer per run length of each timing")
    answers = [[_answer(d) for d in said] for said in decided]
    cause = _confirmed_cause(
        [
            (timing, n, compiles, got)
            for (_, timing, compiles, lengths), said in zip(cases, answers, strict=True)
            for n, got in zip(lengths, said, strict=True)
        ]
    )
    parts = []
    for (name, timing, compiles, lengths), got, calls in zip(cases, answers, decided, strict=True):
        want = [reference_should_compile(timing, n, compiles) for n in lengths]
        shown = (
            f"first call {timing.first_call_s * 1e3:.0f} ms, eager {timing.eager_step_s * 1e3:.2f} "
            f"ms, compiled {timing.compiled_step_s * 1e3:.2f} ms, {compiles} compile(s)"
        )
        changed = sorted({str(k) for call in calls for k in call.get("changed", [])})
        if changed:
            why = (
                f"your function changed its timing argument ({', '.join(changed)}): the "
                "notebook asks several questions of one timing, and each later answer would "
                "read the changed one; keep the compile cost in a local variable"
            )
            parts.append(correct(name, False, f"{shown}: {why}"))
            continue
        if any(isinstance(g, ZeroDivisionError) for g in got):
            why = (
                "your code divided by zero: a compiled step exactly as fast as eager gains "
                "nothing per step, so compiling never pays: return False"
            )
            parts.append(correct(name, False, f"{shown}: {why}"))
            continue
        if not all(_is_bool(g) for g in got):
            said = ", ".join(repr(g) for g in got)
            parts.append(correct(name, False, f"{shown}: returned {said}, not True or False"))
            continue
        ok = [bool(g) for g in got] == want
        said = ", ".join(f"{n} steps: {bool(g)}" for n, g in zip(lengths, got, strict=True))
        message = f"{shown}: you said {said}"
        if not ok:
            expected = ", ".join(f"{n}: {w}" for n, w in zip(lengths, want, strict=True))
            message += f"; expected {expected}: " + (
                cause
                or "compile exactly when the time saved over the run exceeds the "
                "compile cost; see the exercise's hint"
            )
        parts.append(correct(name, ok, message))
    return parts
