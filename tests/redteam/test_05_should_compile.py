"""Red team, notebook 05 exercise 3 (`should_compile(timing, run_steps, compiles=1)`), written
blind: from the notebooks, the generic check API, the lesson's public signatures and what the
check prints, never its code or its tests.

Each case is a learner's answer, the verdict it deserves and, for a wrong one, the cause the
failing parts of the message must name (and causes they must not name).

The check measures a real TorchDynamo compile on every call (2-9 s on the shared machine). The
cases replace that measurement with a made-up one a machine could give (TorchDynamo alone:
the compiled step no faster than eager), chosen so that the break-even of the check's derived
"1.25x faster" scenarios falls just above a whole number of steps (700.03 and 4200.2 steps,
on the 2**-20 s grid so no rounding moves it). That is a measurement like any other, and one
on which rounding the break-even to the nearest step looks right. One valid answer runs on the
real measurement with COURSE_REDTEAM=all.
"""

from __future__ import annotations

import copy
import math
import sys
from fractions import Fraction

import pytest
from redteam_helpers import assert_verdict, in_ci, open_holes, run_check

from course_utils.lessons import fast_kernels as lesson

UNIT = 2.0**-20  # seconds: every made-up time is a whole number of these
# eager 14680 units (divisible by 5, so eager / 1.25 is exact), first call chosen so that
# (first - eager/1.25) / (eager - eager/1.25) = 700 + 100/2936: 6 compiles, 4200 + 600/2936.
MADE_UP = lesson.CompileTiming(
    first_call_s=(11744 + 700 * 2936 + 100) * UNIT,
    eager_step_s=14680 * UNIT,
    compiled_step_s=14690 * UNIT,  # TorchDynamo alone: a hair slower than eager
)


@pytest.fixture
def measured(monkeypatch):
    """The check's measurement replaced by `MADE_UP` (a fresh copy per call), wherever the
    lesson's modules bound `dynamo_timing`."""
    original = lesson.dynamo_timing
    for name, module in list(sys.modules.items()):
        if name.startswith("course_utils.lessons.fast_kernels"):
            for attr, value in list(vars(module).items()):
                if value is original:
                    monkeypatch.setattr(module, attr, lambda *a, **k: copy.copy(MADE_UP))
    return MADE_UP


def _totals(t, n, compiles):
    eager = n * t.eager_step_s
    compiled = compiles * (t.first_call_s - t.compiled_step_s) + n * t.compiled_step_s
    return eager, compiled


# --- valid: different code, same decision ----------------------------------------------------


def valid_first_calls_then_the_rest(timing, run_steps, compiles=1):
    """Each compile is a first call (it ran a step); the other steps are compiled steps."""
    compiled = compiles * timing.first_call_s + (run_steps - compiles) * timing.compiled_step_s
    return compiled < run_steps * timing.eager_step_s


def valid_break_even_guarded(timing, run_steps, compiles=1):
    """Solve for the break-even, and say no when no run is long enough."""
    gain = timing.eager_step_s - timing.compiled_step_s
    if gain <= 0:
        return False
    return run_steps > compiles * (timing.first_call_s - timing.compiled_step_s) / gain


def valid_exact_fractions(timing, run_steps, compiles=1):
    """Exact arithmetic: a float can never turn a tie into a win."""
    first, eager, compiled = map(
        Fraction, (timing.first_call_s, timing.eager_step_s, timing.compiled_step_s)
    )
    return run_steps * (eager - compiled) > compiles * (first - compiled)


def valid_floor_of_break_even(timing, run_steps, compiles=1):
    """A whole number of steps past the floor of the break-even (strict, so a tie loses)."""
    gain = timing.eager_step_s - timing.compiled_step_s
    if gain <= 0:
        return False
    return run_steps > math.floor(compiles * (timing.first_call_s - timing.compiled_step_s) / gain)


def valid_per_shape_share(timing, run_steps, compiles=1):
    """Each shape's share of the run must repay that shape's compile."""
    gain = timing.eager_step_s - timing.compiled_step_s
    return (run_steps / compiles) * gain > timing.first_call_s - timing.compiled_step_s


# --- wrong: what a half-understanding learner writes ----------------------------------------


def wrong_subtracts_one_step_for_all_compiles(timing, run_steps, compiles=1):
    """Operator precedence: compiles * first - compiled subtracts the step only once."""
    cost = compiles * timing.first_call_s - timing.compiled_step_s
    return run_steps * (timing.eager_step_s - timing.compiled_step_s) > cost


def wrong_overhead_over_an_eager_step(timing, run_steps, compiles=1):
    """Compile cost taken as first call minus an *eager* step: one step off."""
    cost = compiles * (timing.first_call_s - timing.eager_step_s)
    return run_steps * (timing.eager_step_s - timing.compiled_step_s) > cost


def wrong_guards_zero_gain_only(timing, run_steps, compiles=1):
    """Guards the division, not the sign: a slower compiled step gets a negative break-even."""
    gain = timing.eager_step_s - timing.compiled_step_s
    if gain == 0:
        return False
    return run_steps > compiles * (timing.first_call_s - timing.compiled_step_s) / gain


def wrong_abs_gain(timing, run_steps, compiles=1):
    """'The gain is the difference between the steps', sign dropped."""
    gain = abs(timing.eager_step_s - timing.compiled_step_s)
    return run_steps * gain > compiles * (timing.first_call_s - timing.compiled_step_s)


def wrong_rounds_break_even(timing, run_steps, compiles=1):
    """A whole number of steps by rounding: 700.6 -> 701, so 701 steps 'tie'."""
    gain = timing.eager_step_s - timing.compiled_step_s
    if gain <= 0:
        return False
    return run_steps > round(compiles * (timing.first_call_s - timing.compiled_step_s) / gain)


def wrong_ceil_break_even(timing, run_steps, compiles=1):
    """Steps 'needed' rounded up, then strictly more than that: one step late."""
    gain = timing.eager_step_s - timing.compiled_step_s
    if gain <= 0:
        return False
    return run_steps > math.ceil(compiles * (timing.first_call_s - timing.compiled_step_s) / gain)


def wrong_compile_if_faster(timing, run_steps, compiles=1):
    """Forgets the investment: compile whenever the compiled step is faster."""
    return timing.compiled_step_s < timing.eager_step_s


def wrong_inverted(timing, run_steps, compiles=1):
    """The comparison the wrong way round."""
    eager, compiled = _totals(timing, run_steps, compiles)
    return compiled > eager


def wrong_mutates_timing(timing, run_steps, compiles=1):
    """Keeps 'the compile alone' in the timing itself: right once, wrong for the next call
    on the same timing (the notebook's demo asks six questions of one `t`)."""
    timing.first_call_s -= timing.compiled_step_s
    gain = timing.eager_step_s - timing.compiled_step_s
    return run_steps * gain > compiles * timing.first_call_s


def wrong_uses_lessons_break_even(timing, run_steps, compiles=1):
    """Outsources the exercise to the lesson's own break-even (printed by the demo)."""
    return run_steps > lesson.exact_break_even(timing, compiles)


def _case(fn, expect="failed", cause=None, not_causes=()):
    kind = "valid" if fn.__name__.startswith("valid_") else "wrong"
    return pytest.param(fn, expect, cause, not_causes, id=f"{kind}-{fn.__name__[6:]}")


TIE = r"exactly as long|strictly|tie"  # the cause of `>=`, wrong for any other mistake
SLOWER = r"slower|not positive|no run is long enough|never"
CASES = [
    _case(valid_first_calls_then_the_rest, "passed"),
    _case(valid_break_even_guarded, "passed"),
    _case(valid_exact_fractions, "passed"),
    _case(valid_floor_of_break_even, "passed"),
    _case(valid_per_shape_share, "passed"),
    _case(wrong_subtracts_one_step_for_all_compiles, cause=r"6 compile|shape", not_causes=(TIE,)),
    _case(wrong_overhead_over_an_eager_step, cause=r"expected", not_causes=(TIE, r"ratio")),
    _case(wrong_guards_zero_gain_only, cause=SLOWER, not_causes=(TIE,)),
    _case(wrong_abs_gain, cause=SLOWER, not_causes=(TIE,)),
    _case(wrong_rounds_break_even, cause=r"expected", not_causes=(TIE,)),
    _case(wrong_ceil_break_even, cause=r"expected", not_causes=(TIE,)),
    # not_causes "ratio" added after the blind run: the answer uses the difference.
    _case(wrong_compile_if_faster, cause=r"expected", not_causes=(TIE, r"ratio")),
    _case(wrong_inverted, cause=r"expected", not_causes=(TIE,)),
    _case(wrong_mutates_timing, cause=r"chang|modif|mutat|wrote|timing"),
    _case(wrong_uses_lessons_break_even, cause=r"reference|lesson"),
]


HOLES: dict[str, str] = {}  # all closed in the check (see README, "after")


@pytest.mark.parametrize("fn, expect, cause, not_causes", open_holes(CASES, HOLES))
def test_should_compile(fn, expect, cause, not_causes, measured):
    verdict = run_check(lesson.check_break_even, fn)
    shown = f"first call {measured.first_call_s * 1e3:.0f} ms"
    full = run_check(lesson.check_break_even, valid_exact_fractions)
    assert shown in full.message, f"SETUP: the made-up measurement did not reach the check: {full}"
    assert_verdict(verdict, expect, cause, not_causes)


REAL = [
    pytest.param(valid_break_even_guarded, id="valid-break_even_guarded-real-measurement"),
    pytest.param(wrong_rounds_break_even, id="wrong-rounds_break_even-real-measurement"),
]


@pytest.mark.parametrize("fn", in_ci(REAL, keep=set()))
def test_should_compile_on_the_real_measurement(fn):
    """The check's own TorchDynamo timing (2-9 s): the valid answer passes; the rounding one
    is caught on every machine (the check's n.75-steps scenario does not depend on it)."""
    expect = "passed" if fn.__name__.startswith("valid_") else "failed"
    assert_verdict(run_check(lesson.check_break_even, fn), expect)


def test_made_up_measurement_hides_rounding_as_designed():
    """The specimen is what the docstring says: rounding agrees with the exact answer at every
    run length near both break-evens of the 1.25x scenarios, though it is wrong elsewhere."""
    fast = lesson.CompileTiming(MADE_UP.first_call_s, MADE_UP.eager_step_s, 11744 * UNIT)
    for compiles in (1, 6):
        for n in range(690 * compiles, 710 * compiles):
            right = valid_exact_fractions(fast, n, compiles)
            assert wrong_rounds_break_even(fast, n, compiles) == right
    other = lesson.CompileTiming(fast.first_call_s + 1500 * UNIT, fast.eager_step_s, 11744 * UNIT)
    assert any(
        wrong_rounds_break_even(other, n) != valid_exact_fractions(other, n)
        for n in range(690, 710)
    )
