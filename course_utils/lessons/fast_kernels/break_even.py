"""Lesson 05's third check: when compiling pays. Its scenarios sit on a 2**-20 s grid so that
every right way to compute the break-even agrees to the step, and include a tie and a
whole-number ratio, where rounding mistakes show."""

from __future__ import annotations

import math

from ...checks import check, correct
from . import compiling
from .checks import HINTS, THRESHOLDS
from .reference import reference_break_even_steps

# --- exercise 3: when compiling pays -------------------------------------------------------


def _break_even_cause(timing, compiles: int, got) -> str:
    """Name the mistake behind a wrong break-even, by trying the usual ones."""
    gain = timing.eager_step_s - timing.compiled_step_s
    if gain <= 0:
        return "a compiled step that is not faster never pays back: return math.inf"
    whole = compiles * timing.first_call_s / gain
    once = (timing.first_call_s - timing.compiled_step_s) / gain
    ratio = (
        compiles
        * (timing.first_call_s - timing.compiled_step_s)
        / (timing.eager_step_s / timing.compiled_step_s)
    )
    for guess, why in (
        (whole, "the whole first call was counted as compile time; it also ran one step"),
        (once, f"the {compiles} compiles (one per shape) were counted once; each one pays again"),
        (ratio, "the gain per step is eager - compiled seconds, not their ratio"),
    ):
        if got == math.ceil(guess):
            return why
    return "expected the steps after which the saved time covers the compile time"


def _q(seconds: float) -> float:
    """Seconds on a grid of 2**-20 s (about 1 us): sums and products of a few of them are
    exact in float64, so every right way of computing the break-even agrees to the step."""
    return round(seconds * 2**20) / 2**20


def _break_even_scenarios(measured) -> list[tuple[str, compiling.CompileTiming, int]]:
    first, eager = _q(measured.first_call_s), _q(measured.eager_step_s)
    faster = _q(eager / 1.25)
    gain = _q(eager / 5)  # a whole-number ratio: the compile cost is exactly n gains
    n = max(2, round((first - (eager - gain)) / gain))
    return [
        (
            "measured here (TorchDynamo only)",
            compiling.CompileTiming(first, eager, _q(measured.compiled_step_s)),
            1,
        ),
        ("your first call, a 1.25x faster step", compiling.CompileTiming(first, eager, faster), 1),
        ("the same, 6 shapes with dynamic=False", compiling.CompileTiming(first, eager, faster), 6),
        (
            f"a compile cost of exactly {n} steps' gain",
            compiling.CompileTiming(eager - gain + n * gain, eager, eager - gain),
            1,
        ),
        ("a compiled step 10% slower", compiling.CompileTiming(first, eager, _q(eager * 1.1)), 1),
        ("a compiled step exactly as fast", compiling.CompileTiming(first, eager, eager), 1),
    ]


def _rounding_cause(timing, compiles: int, got) -> str | None:
    """Confirmed rounding mistakes: not a whole number, rounded down, or floor + 1 where the
    exact answer is whole."""
    exact = (
        compiles
        * (timing.first_call_s - timing.compiled_step_s)
        / (timing.eager_step_s - timing.compiled_step_s)
    )
    if not float(got).is_integer():
        return "not a whole number of steps: round up (math.ceil), a step happens whole"
    if got == math.floor(exact) and got < exact:
        return (
            f"rounded down: after {got} steps the compiled run has not caught up yet "
            f"(exactly {exact:.4g} needed): round up with math.ceil"
        )
    if exact.is_integer() and got == exact + 1:
        return (
            f"exactly {exact:.0f} steps already catch up (the totals are equal, and equal "
            "is caught up): floor + 1 counts one step too many here; use math.ceil"
        )
    return None


@check("05-break-even", points=2, hint=HINTS["break_even"])
def check_break_even(break_even_steps):
    parts = []
    slack = THRESHOLDS["break_even_slack"].value
    for name, timing, compiles in _break_even_scenarios(compiling.dynamo_timing()):
        want = reference_break_even_steps(timing, compiles)
        try:
            got = break_even_steps(timing, compiles)
        except ZeroDivisionError:
            if timing.eager_step_s != timing.compiled_step_s:
                raise
            parts.append(
                correct(
                    name,
                    False,
                    "your code divided by zero: a compiled step exactly as fast as eager gains "
                    "nothing per step, so compiling never pays: return math.inf",
                )
            )
            continue
        numeric = isinstance(got, int | float) and not isinstance(got, bool)
        ok = numeric and (got == want if math.isinf(want) else abs(got - want) <= slack)
        shown = (
            f"first call {timing.first_call_s * 1e3:.0f} ms, eager {timing.eager_step_s * 1e3:.2f} ms, "
            f"compiled {timing.compiled_step_s * 1e3:.2f} ms"
        )
        message = f"{shown}: you said {got!r} steps, expected {want}"
        if not ok and numeric:
            cause = (
                None
                if math.isinf(want) or math.isinf(got)
                else _rounding_cause(timing, compiles, got)
            )
            message += f": {cause or _break_even_cause(timing, compiles, got)}"
        parts.append(
            correct(name, ok, message, value=float(got) if numeric else None, threshold=float(want))
        )
    return parts
