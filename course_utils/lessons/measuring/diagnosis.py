"""Why an answer of lesson 00 is wrong, told apart by probes that each lack one trap of the
graded scenario (a timer run on a synchronous step, a steady one, one with a single slow
call), or explained layer by layer (FLOPs). The checks name a cause only when one of these
confirms it. Each run of the learner's code goes through a probe (probes.py)."""

from __future__ import annotations

import itertools
from numbers import Real

from ...probes import LearnerRaised, observe
from .probes import (
    COUNT_REPEATS,
    NO_WORK_AT,
    OUTLIER_AT,
    OUTLIER_S,
    PROBE_WARMUP,
    SHORT_REPEATS,
    SHORT_WARMUP,
    SLOW_CALLS,
    SLOW_S,
    STEP_S,
    TIMER_REPEATS,
    TIMER_WARMUP,
    async_recipe,
    sync_recipe,
    timer_reading,
)


def seconds(value) -> float | None:
    """A timer's reading as seconds, or None when it returned no real number."""
    return float(value) if isinstance(value, Real) and not isinstance(value, bool) else None


def read_timer(
    time_step, recipe: dict, *, repeats: int = TIMER_REPEATS, warmup: int = TIMER_WARMUP
) -> float:
    """The learner's timer on one step (NaN when it returns no number)."""
    seen = observe(timer_reading, time_step, recipe, warmup, repeats)
    t = seconds(seen["seconds"])
    return t if t is not None else float("nan")


def _read_or_nan(time_step, recipe: dict, *, repeats: int, warmup: int = TIMER_WARMUP) -> float:
    """read_timer, NaN when the learner's timer raises: a probe only explains a failure, an
    error in it must not replace the verdict."""
    try:
        return read_timer(time_step, recipe, repeats=repeats, warmup=warmup)
    except LearnerRaised:
        return float("nan")


def timer_diagnosis(
    t: float, time_step, low: float, high: float, fastest_max: float, step_s: float = STEP_S
) -> str:
    """Why the timer read `t` on the graded scenario at a step of `step_s`, told apart by probe
    steps (of STEP_S) that each lack one of the scenario's traps: a synchronous step (no
    waiting in synchronize()), a steady one (no slow calls), one slow call after the warm-up
    only, and a synchronous one with two empty calls (a timer reading below `fastest_max` x
    the step there reports its fastest sample). A cause is named only when its probe confirms
    it."""
    if t != t:  # NaN: the timer did not return a number
        return "return the median as a float number of seconds"
    ratio = t / step_s
    if 0.75 * 1e3 <= ratio <= high * 1e3:  # load only adds delay, as for seconds
        return "that is milliseconds: return seconds, as time.perf_counter() gives them"
    if ratio < low:
        synchronous = read_timer(time_step, sync_recipe(STEP_S))
        if synchronous < 0.25 * STEP_S:
            return (
                f"on a synchronous step that sleeps {STEP_S * 1e3:.0f} ms your timer read "
                f"{synchronous * 1e3:.3g} ms too: your clock misses time the step spends "
                "waiting (in sleep or in synchronize()); time with a wall clock, "
                "time.perf_counter()"
            )
        no_work = {k: 0.0 for k in NO_WORK_AT}
        fastest = read_timer(time_step, sync_recipe(STEP_S, no_work))
        if fastest < fastest_max * STEP_S:
            return (
                f"on a synchronous step whose {TIMER_REPEATS} timed calls take "
                f"{STEP_S * 1e3:.0f} ms but for {len(NO_WORK_AT)} that take nothing, your timer "
                f"read {fastest * 1e3:.3g} ms: it reports the fastest sample (the minimum), "
                "which a short call sets; the median of the samples is the typical call"
            )
        if ratio < 0.25:
            return (
                "your timer measured the launch, not the work: call synchronize() after "
                "step() and before reading the clock"
            )
        return "a correct timer lands close to the queued work"
    steady = read_timer(time_step, async_recipe(STEP_S, 0, 0.0))
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
    outlier = read_timer(
        time_step, async_recipe(STEP_S, 0, 0.0, outlier_at=OUTLIER_AT, outlier_s=OUTLIER_S)
    )
    if outlier / STEP_S > high:
        return _outlier_diagnosis(outlier, time_step)
    return (
        f"right on a steady step and with one slow call after the warm-up, so the one-off "
        f"cost of the first {SLOW_CALLS} calls pulled your figure up: call step() `warmup` "
        "times (the argument, not a fixed count) before timing"
    )


def _outlier_diagnosis(outlier: float, time_step) -> str:
    """Why the figure rose on a steady step with one slow call, the middle sample in time
    order. Near the slow call itself (step + outlier), the figure IS one sample: the slowest,
    or the one in the middle of the run; a second probe moves the slow call to the first
    sample and tells the two apart. Well below it, the slow call was averaged in."""
    slow_sample = STEP_S + OUTLIER_S
    said = (
        f"one call after the warm-up took {OUTLIER_S * 1e3:.0f} ms more, and your figure "
        f"rose to {outlier * 1e3:.4g} ms on a step with only that slow call"
    )
    if outlier < 0.75 * slow_sample:
        return f"{said}: a mean (or a sum) counts an outlier, the median of the samples does not"
    first = TIMER_WARMUP + 1
    moved = read_timer(
        time_step, async_recipe(STEP_S, 0, 0.0, outlier_at=first, outlier_s=OUTLIER_S)
    )
    if moved >= 0.75 * slow_sample:
        return (
            f"{said}, and {moved * 1e3:.4g} ms when the slow call was the first sample: your "
            "figure is the slowest sample (the maximum); the median of the samples is the "
            "typical call"
        )
    return (
        f"{said} (the {OUTLIER_AT - TIMER_WARMUP}th of {TIMER_REPEATS} samples, the middle one "
        f"in time order), but {moved * 1e3:.4g} ms when it was the first sample: your figure is "
        "the sample taken in the middle of the run, not the middle value; sort the samples "
        "before taking the middle (statistics.median does)"
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


def short_run_diagnosis(t: float, time_step, high: float) -> str:
    """Why the timer, right on the long run, misread the short one (warmup=SHORT_WARMUP, one
    repeat). A steady step timed with one repeat has no slow call at all: a reading well
    above the step there can only come from the warm-up's queued work, which that probe
    confirms. Else a synchronous step with the slow first calls alone tells a timed call that
    the warm-up should have paid for, and counts the calls."""
    if t != t:
        return "return the median as a float number of seconds"
    steady = _read_or_nan(time_step, async_recipe(STEP_S, 0, 0.0), repeats=SHORT_REPEATS)
    if steady / STEP_S > high:
        return (
            f"on a steady {STEP_S * 1e3:.0f} ms step timed with warmup={TIMER_WARMUP}, "
            f"repeats={SHORT_REPEATS} your timer read {steady * 1e3:.4g} ms: the "
            f"{TIMER_WARMUP} warm-up calls' queued work ({TIMER_WARMUP * STEP_S * 1e3:.0f} ms) "
            "ran inside your first timed sample. Wait for the warm-up to finish before the "
            "first clock reading"
        )
    # No queued work at all, only slow first calls, as many as `warmup`: a timer reads one of
    # them only if it times a call that the warm-up should have paid for
    slow_first = {k: STEP_S + SLOW_S for k in range(1, SLOW_CALLS + 1)}
    asked = SHORT_WARMUP + SHORT_REPEATS
    try:
        seen = observe(
            timer_reading, time_step, sync_recipe(STEP_S, slow_first), SHORT_WARMUP, SHORT_REPEATS
        )
        first, calls = seconds(seen["seconds"]), seen["calls"]
    except LearnerRaised:
        first, calls = None, 0
    first = first if first is not None else float("nan")
    if first / STEP_S > high:
        said = (
            f"on a synchronous step (its work done inside each call) whose first "
            f"{SLOW_CALLS} calls take {SLOW_S * 1e3:.0f} ms more, timed with "
            f"warmup={SHORT_WARMUP}, repeats={SHORT_REPEATS}, your timer read "
            f"{first * 1e3:.4g} ms in {calls} calls to step()"
        )
        if calls == SHORT_WARMUP + SHORT_REPEATS and first / STEP_S > 2:
            # every call made, yet a slow one in the figure: the warm-up calls were samples
            # (a median of warmup + 1 samples, most of them slow)
            return (
                f"{said}: the warm-up calls were timed as samples. Time only the `repeats` "
                "calls that come after the warm-up"
            )
        fix = (
            "call step() exactly `warmup` times before timing"
            if calls < asked
            else "time only the `repeats` calls that come after the `warmup` ones"
        )
        return f"{said}, not {asked}: a call that pays the one-off cost was timed; {fix}"
    return (
        f"right with {TIMER_REPEATS} repeats, wrong with {SHORT_REPEATS}: compare your samples "
        "with the section on synchronised timing, and time a steady step with repeats=1"
    )


def calls_diagnosis(n: int, time_step) -> tuple[bool, str]:
    """Whether the number of calls to step() follows `warmup` and `repeats`, one for one.
    The graded run made `n` calls for warmup=TIMER_WARMUP, repeats=TIMER_REPEATS; when that is
    not their sum, the same timer runs twice more on a steady step, once with fewer repeats
    and once with a shorter warm-up, and the argument whose change does not change the count
    one for one is named. A fixed number of extra calls (a calibration call) is the timer's
    own business and passes; a fixed number of calls too few is not (issue 34: `warmup - 1`
    warm-up calls passed the count)."""
    asked = TIMER_WARMUP + TIMER_REPEATS
    said = f"step() called {n} times for warmup={TIMER_WARMUP}, repeats={TIMER_REPEATS}"
    if n == asked:
        return True, said
    counts = {}
    for warmup, repeats in ((TIMER_WARMUP, COUNT_REPEATS), (PROBE_WARMUP, TIMER_REPEATS)):
        seen = observe(
            timer_reading, time_step, async_recipe(STEP_S, 0, 0.0), warmup, repeats, True
        )
        counts[warmup, repeats] = int(seen["calls"])  # the count so far is what this needs
    with_repeats = n - counts[TIMER_WARMUP, COUNT_REPEATS]
    with_warmup = n - counts[PROBE_WARMUP, TIMER_REPEATS]
    follows_repeats = with_repeats == TIMER_REPEATS - COUNT_REPEATS
    follows_warmup = with_warmup == TIMER_WARMUP - PROBE_WARMUP
    said += (
        f", {counts[TIMER_WARMUP, COUNT_REPEATS]} for repeats={COUNT_REPEATS}, "
        f"{counts[PROBE_WARMUP, TIMER_REPEATS]} for warmup={PROBE_WARMUP}"
    )
    if follows_repeats and follows_warmup and n < asked:
        return False, (
            f"{said}: the count follows both arguments, but {asked - n} call(s) short of "
            "warmup + repeats: a warm-up call or a sample is missing; call step() `warmup` "
            "times, then time `repeats` calls"
        )
    if follows_repeats and follows_warmup:
        return True, f"{said}: the count follows both arguments"
    faults = []
    if not follows_warmup:
        faults.append(
            (
                "your timer ignores `warmup`"
                if with_warmup == 0
                else "the count does not follow `warmup` one for one"
            )
            + ": call step() `warmup` times before timing (the argument, not a fixed count)"
        )
    if not follows_repeats:
        faults.append(
            (
                "your timer ignores `repeats`"
                if with_repeats == 0
                else "the count does not follow `repeats` one for one"
            )
            + ": take `repeats` samples (the argument, not a fixed count)"
        )
    return False, f"{said}: {'; '.join(faults)}"
