"""Probes that tell the mistakes of lesson 00's answers apart: a timer run on steps that each
lack one trap of the graded scenario, and FLOP counts explained layer by layer. The checks
name a cause only when one of these confirms it."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from numbers import Real

from .demo import make_async_step


def _seconds(value) -> float | None:
    return float(value) if isinstance(value, Real) and not isinstance(value, bool) else None


# the timer scenario: 4 slow first calls, so a timer without warm-up has 4 slow samples of 7,
# and one slow call after the warm-up (the 3rd sample), so a mean reads 30 + 200/7 = 59 ms
STEP_S, SLOW_CALLS, SLOW_S, TIMER_WARMUP, TIMER_REPEATS = 0.03, 4, 0.15, 6, 7
OUTLIER_AT, OUTLIER_S = TIMER_WARMUP + 3, 0.2
# the short run: the same step timed with 2 repeats (the slow call 9 is not reached). A timer
# that does not wait for the warm-up's queued work (4 x 180 + 2 x 30 = 780 ms) before its first
# clock reading has that work in its first sample: the median of 2 is their mean, 420 ms (14x).
# Two samples, not three with the slow call as a third: a stall on either fast sample of three
# failed a valid timer at load ~8; the mean of two tolerates a 30 ms stall on one
SHORT_REPEATS = 2


def probe_timer(time_step: Callable, step, synchronize, repeats: int = TIMER_REPEATS) -> float:
    """The learner's timer on a probe step (NaN when it returns no number)."""
    t = _seconds(time_step(step, synchronize, warmup=TIMER_WARMUP, repeats=repeats))
    synchronize()
    return t if t is not None else float("nan")


def _sleeping_step() -> None:
    time.sleep(STEP_S)  # a synchronous step: the work is done when step() returns


def timer_diagnosis(t: float, time_step: Callable, low: float, high: float) -> str:
    """Why the timer read `t`, told apart by probe steps that each lack one of the scenario's
    traps: a synchronous step (no waiting in synchronize()), a steady one (no slow calls), one
    slow call after the warm-up only. A cause is named only when its probe confirms it."""
    if t != t:  # NaN: the timer did not return a number
        return "return the median as a float number of seconds"
    ratio = t / STEP_S
    if 0.75 * 1e3 <= ratio <= high * 1e3:  # load only adds delay, as for seconds
        return "that is milliseconds: return seconds, as time.perf_counter() gives them"
    if ratio < low:
        synchronous = probe_timer(time_step, _sleeping_step, lambda: None)
        if synchronous < 0.25 * STEP_S:
            return (
                f"on a synchronous step that sleeps {STEP_S * 1e3:.0f} ms your timer read "
                f"{synchronous * 1e3:.3g} ms too: your clock misses time the step spends "
                "waiting (in sleep or in synchronize()); time with a wall clock, "
                "time.perf_counter()"
            )
        if ratio < 0.25:
            return (
                "your timer measured the launch, not the work: call synchronize() after "
                "step() and before reading the clock"
            )
        return "a correct timer lands close to the queued work"
    steady = probe_timer(time_step, *make_async_step(STEP_S, 0, 0.0))
    if 0.75 * TIMER_REPEATS <= steady / STEP_S <= high * TIMER_REPEATS:
        return (
            f"on a steady {STEP_S * 1e3:.0f} ms step your timer read {steady * 1e3:.4g} ms, "
            f"about {TIMER_REPEATS} (repeats) x the step: return the time per call, not the total"
        )
    if not 0.75 <= steady / STEP_S <= high:
        return (
            f"on a steady {STEP_S * 1e3:.0f} ms step your timer read {steady * 1e3:.4g} ms: "
            "compare with the section on synchronised timing"
        )
    outlier = probe_timer(
        time_step, *make_async_step(STEP_S, 0, 0.0, outlier_at=OUTLIER_AT, outlier_s=OUTLIER_S)
    )
    if outlier / STEP_S > high:
        return (
            f"one call after the warm-up took {OUTLIER_S * 1e3:.0f} ms more, and your figure "
            f"rose to {outlier * 1e3:.4g} ms on a step with only that slow call: a mean (or "
            "a sum) counts an outlier, the median of the samples does not"
        )
    return (
        f"right on a steady step and with one slow call after the warm-up, so the one-off "
        f"cost of the first {SLOW_CALLS} calls pulled your figure up: call step() `warmup` "
        "times (the argument, not a fixed count) before timing"
    )


def layer_diagnosis(diff: float, layers: list, per_layer: list[int]) -> str:
    """Name the layers whose matmuls the answer miscounts, when a unique pattern of -2..+1
    matmuls per layer explains the difference (a probe per layer, not a guess)."""
    fits = [
        ks
        for ks in itertools.product(range(-2, 2), repeat=len(layers))
        if any(ks) and sum(k * f for k, f in zip(ks, per_layer, strict=True)) == diff
    ]
    if not fits:
        return "compare forward and backward matmuls layer by layer"
    ks = min(fits, key=lambda ks: sum(map(abs, ks)))
    if sum(1 for f in fits if sum(map(abs, f)) == sum(map(abs, ks))) > 1:
        return "compare forward and backward matmuls layer by layer"
    said = [
        f"layer {i + 1} ({a}->{b}) {abs(k)} matmul{'s' if abs(k) > 1 else ''} "
        + ("too few" if k < 0 else "too many")
        for i, ((a, b), k) in enumerate(zip(layers, ks, strict=True))
        if k
    ]
    rule = (
        "forward, weight gradient and input gradient are three matmuls per layer; only the "
        "first layer skips its input gradient (the data does not require grad)"
    )
    if ks[0] == 1 and sum(ks[1:]) == -1 and all(k in (0, -1) for k in ks[1:]):
        j = ks.index(-1, 1)
        a, b = layers[j]
        return (
            f"you skipped the input gradient of layer {j + 1} ({a}->{b}), not of the first: {rule}"
        )
    return f"{', '.join(said)}: {rule}"


def short_run_diagnosis(t: float, time_step: Callable, high: float) -> str:
    """Why the timer, right on the long run, misread the short one. A steady step timed with
    one repeat has no slow call at all: a reading well above the step there can only come
    from the warm-up's queued work, which that probe confirms."""
    if t != t:
        return "return the median as a float number of seconds"
    step, synchronize = make_async_step(STEP_S, 0, 0.0)
    try:  # a probe only explains the failure: an error here must not replace the verdict
        steady = probe_timer(time_step, step, synchronize, repeats=1)
    except Exception:
        synchronize()
        steady = float("nan")
    if steady / STEP_S > high:
        return (
            f"on a steady {STEP_S * 1e3:.0f} ms step timed with repeats=1 your timer read "
            f"{steady * 1e3:.4g} ms: the {TIMER_WARMUP} warm-up calls' queued work "
            f"({TIMER_WARMUP * STEP_S * 1e3:.0f} ms) ran inside your first timed sample. Wait "
            "for the warm-up to finish before the first clock reading"
        )
    return (
        f"right with {TIMER_REPEATS} repeats, wrong with {SHORT_REPEATS}: compare your samples "
        "with the section on synchronised timing, and time a steady step with repeats=1"
    )
