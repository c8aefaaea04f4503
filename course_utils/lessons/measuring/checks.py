"""Lesson 00's graded checks and the thresholds they use, each with its evidence.

Each check runs the learner's function on scenarios where the plausible mistakes give a
different physical answer (seconds, bytes, FLOPs, the operator named), and names the
mistake it sees from what it measured.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

import torch
from torch import nn

from ...checks import Threshold, at_most, check, correct, retry_measure
from ...measure import flops
from ...memory import activation_bytes
from ...probes import LearnerRaised, observe, observe_timed, specimen_rng
from .demo import activation_cases
from .diagnosis import (
    calls_diagnosis,
    layer_diagnosis,
    seconds,
    short_run_diagnosis,
    timer_diagnosis,
)
from .probes import (
    FAST_AT,
    OUTLIER_AT,
    SHORT_REPEATS,
    SHORT_WARMUP,
    SLOW_CALLS,
    SLOW_S,
    STEP_S,
    TIMER_REPEATS,
    TIMER_WARMUP,
    async_recipe,
    graded_recipe,
    matmul_recipe,
    queued_seconds,
    saved_bytes_of,
    timer_reading,
    train_flops_of,
)

THRESHOLDS = {
    "timer_low": Threshold(
        0.75,
        "lowest accepted timer result / the 30 ms queued per step: a synchronised timer cannot "
        "read less than the sleep; no sync reads < 0.1 ms (0.003 ms measured); the fastest "
        "sample (two 1 ms calls among the 7 timed) read 1.12-1.99 ms (n=10, load ~8)",
        measured_on=("cpu-bf16",),
    ),
    "timer_high": Threshold(
        1.5,
        "highest accepted ratio: the reference read 30.2-44.0 ms (n=10, 2-core cpu-bf16 VM at "
        "load ~11; 30.22-30.29 ms, n=10 at load ~8 with the two fast calls; load only delays "
        "wake-ups, hence the asymmetric band, and the check retries 3 times). Wrong timers, "
        "from the scenario: no warm-up median 180 ms (6x), no warm-up mean 116 ms (3.9x), a "
        "warmed-up mean 50.5-51.1 ms (1.7x, n=5: one 230 ms and two 1 ms calls in 7 samples), "
        "the middle sample unsorted or the maximum 230 ms (7.7x), milliseconds 1000x. The "
        "drawn steps (30-60 ms, the second 75-180 ms, STEP_US): the reference read 1.001-1.066x "
        "at 30 and 60 ms and on a second step of 90 and 180 ms (n=5 each, load ~14); the "
        "scenario's ratios are the same at every step (probes.graded_recipe)",
        measured_on=("cpu-bf16",),
    ),
    "single_high": Threshold(
        4.0,
        "the short run's highest accepted ratio (warmup=4, repeats=1: one sample, no median to "
        "shield it from a stall): the reference read 30.2-33.9 ms (n=20, 2-core cpu-bf16 VM at "
        "load ~7), 30.2-79.6 ms beside one spinning process (n=20, load ~9); a timer that syncs "
        "before each sample 30.2-41.7 ms, one with a calibration call 30.2-40.0 ms (n=10 each, "
        "beside it); the check retries 3 times. Wrong timers read 750 ms (25x: no sync after "
        "the warm-up, with any median: statistics, torch, numpy, median_low), 180 ms (6x: "
        "warm-up calls timed as samples, or `warmup - 1` of them) (n=2 each, load ~7)",
        measured_on=("cpu-bf16",),
    ),
    "fastest_sample": Threshold(
        0.25,
        "the minimum's probe (a synchronous step, 2 of its 7 timed calls empty), highest "
        "reading / 30 ms that names the fastest sample: the minimum read 0.08-1.72 ms (n=5), "
        "the reference and a timer that reads the launch 30.1 ms (n=5 each; on a synchronous "
        "step the launch is the work), a mean 21.5-22.4 ms (n=5; load ~8)",
        measured_on=("cpu-bf16",),
    ),
    "wall_of_calls": Threshold(
        0.98,
        "lowest accepted wall time of one run of the timer, as the check's clock sees the probe "
        "call, / the work its warmup + repeats calls queue: the simulated device sleeps at "
        "least each call's work and the probe waits for the queue, so any run that made the "
        "calls reads >= 1: the reference read 1.0008-1.031 on the graded, short and second "
        "steps at 30 and 60 ms (n=5 each, 2-core cpu-bf16 VM at load ~14); a timer that never "
        "calls step() read 0.0002-0.01 (the red team's closure and frame readers)",
        measured_on=("cpu-bf16",),
    ),
    "timer_vs_wall": Threshold(
        2.5,
        "512x512 matmul (warmup=1, repeats=5), the learner's figure against the judge's wall "
        "clock around the whole call / 6, median of 5: the reference read 1.18-1.25 (n=4, in a notebook, 2-core cpu-bf16 VM at load ~8; 1.0 would need every call, the round trip included, equal to the median); a figure "
        "in milliseconds is off 1000x, a sum of the repeats 5x, a timer that never calls "
        "step() by the whole matmul",
        measured_on=("cpu-bf16",),
    ),
    "bytes_rel_error": Threshold(
        0.01,
        "valid counts differ only by the 4-byte total_weight scalar nll_loss saves (<= 0.08% "
        "of a case); over all 8,505 drawn specimens (ACTIVATION_SIZES, each case at each of "
        "its 243 MLP and 315 attention sizes): parameters counted +443% at least on the MLP "
        "(+0.8% at least on the attention, where the MLP catches it), every save counted "
        "+47..96%, storages counted per save +80..216%, views keyed by tensor address "
        "-12..-18% on the attention, view storages keyed by tensor address +94..142%, every "
        "cause named as in the 12 red-team and test mistakes (torch 2.14 on CPU)",
        measured_on=("cpu-bf16",),
    ),
    "op_share_of_top": Threshold(
        0.8,
        "an answer passes if its self time is >= 80% of the top operator's (near-ties only); "
        "the top operator had 4.2-12.5x the self time of the next in every profile (torch "
        "2.14, 1 thread, 2-core cpu-bf16 VM at load ~10, n=6-8 profiles per scenario), "
        "1.46-2.6x in the sorts scenario (its 8 sorts against one mm, n=4 at load ~10), "
        "whose sort rows grouped by input shape held 0.3-0.6x the mm's; 2.3-89x in the argsort "
        "scenario, where aten::argsort, which wraps the sort, had < 0.2x its self time (n=8 at "
        "load ~10). With the sizes drawn per run (slowest_op.draw_sizes), at the ends of each "
        "range, n=4 profiles each at load 13-19: loop cumsum-first 3.4-8.2x, erfinv-first "
        "5.2-9.6x; resize bicubic-first 7.3-24x, nearest-first 12-109x; sorts sort-first "
        "2.0-3.9x (grouped by shape, an mm row first in 8 of 8), median-first 4.1-9.4x (an mm "
        "row first in 8 of 8); argsort sort-first 2.8-298x, cdist-first 4.5-176x",
        measured_on=("cpu-bf16",),
    ),
}


def _timer_diagnosis(t: float, time_step, step_s: float) -> str:
    return timer_diagnosis(
        t,
        time_step,
        THRESHOLDS["timer_low"].value,
        THRESHOLDS["timer_high"].value,
        THRESHOLDS["fastest_sample"].value,
        step_s,
    )


# The step's duration is drawn per run in the judge (probes.specimen_rng), in microseconds: a
# notebook gets the first, the 30 ms every threshold's evidence was first measured on; the
# judge any of 30-60 ms, the one-off, outlier and fast calls scaled with it
# (probes.graded_recipe). Load only adds delay, and the same delay is a smaller share of a
# longer step, so the 30 ms evidence holds across the range (THRESHOLDS).
STEP_US = range(30_000, 60_001)
# A second, steady step, 2.5-3x the first (drawn too; 2.5x in a notebook), timed with the same
# warmup and repeats: no number lies within [timer_low, timer_high] of both (0.75 x 2.5 > 1.5),
# so no timer that returns a constant, or the same value for the same arguments, passes both
TWIN_PERCENT = range(250, 301)


def _wall_of_calls(wall: float, recipe: dict, warmup: int, repeats: int) -> tuple[bool, str]:
    """Whether the judge's clock saw the work of warmup + repeats calls: the probe cannot
    return before the work its step's calls queued has run, so a run of `wall` seconds made
    fewer calls if `wall` is shorter. The check's own clock, not a count in the learner's
    process, is the evidence."""
    work = queued_seconds(recipe, warmup + repeats)
    ok = wall >= THRESHOLDS["wall_of_calls"].value * work
    said = (
        f"the call of your timer took {wall * 1e3:.4g} ms by the check's clock; "
        f"warmup + repeats = {warmup + repeats} calls of this step queue {work * 1e3:.4g} ms"
    )
    if not ok:
        said += (
            ": fewer calls of step() ran than that, whatever was counted (each call queues its "
            "work, and the run waits for it before it returns)"
        )
    return ok, said


def _timed_run(time_step, recipe: dict, warmup: int, repeats: int, ok) -> tuple[float, dict]:
    """The learner's timer on `recipe` (retried while its reading fails `ok`), as (its reading,
    {'calls': the count beside it, 'wall': the seconds the judge's clock saw the run take})."""
    seen_last: dict = {}

    def measure() -> float:
        seen, wall = observe_timed(timer_reading, time_step, recipe, warmup, repeats)
        seen_last.update(calls=int(seen["calls"]), wall=wall)
        t = seconds(seen["seconds"])
        return t if t is not None else float("nan")

    return retry_measure(measure, ok=ok), seen_last


def _short_run(time_step, low: float, step_s: float):
    """The step with its slow first calls only, timed with warmup=SHORT_WARMUP (exactly those
    calls) and a single repeat: a timer that starts its first clock reading before the
    warm-up's queued work has finished has that work in its only sample, whatever statistic it
    takes; one that warms up fewer times than `warmup` times a slow call; one that drops its
    first sample has none left. No slow call after the warm-up: a timer with one untimed extra
    call (the count passes it) would meet it. One sample has no median to shield it from a
    stall, hence its own, wider limit (`single_high`). The judge's clock must see the work of
    the warm-up and the sample."""
    high = THRESHOLDS["single_high"].value * step_s
    raised: list[LearnerRaised] = []
    recipe = async_recipe(step_s, SLOW_CALLS, SLOW_S * step_s / STEP_S)
    seen: dict = {}

    def measure() -> float:
        try:
            t, last = _timed_run(time_step, recipe, SHORT_WARMUP, SHORT_REPEATS, lambda t: True)
        except LearnerRaised as exc:  # the learner's error is the reading: no retry helps
            raised.append(exc)
            return float("inf")
        seen.update(last)
        return t

    t = retry_measure(measure, ok=lambda t: bool(raised) or low <= t <= high)
    run = f"the step with its slow first calls only, warmup={SHORT_WARMUP}, repeats={SHORT_REPEATS}"
    if raised:
        said = (
            f"{run}: {raised[-1]}. A timer must work for any `repeats`, 1 included: every "
            "call after the warm-up is a sample"
        )
        return correct("short run", False, said)
    ok = low <= t <= high
    said = (
        f"{run}: your timer says {t * 1e3:.4g} ms, expected {step_s * 1e3:.1f} ms "
        f"({low * 1e3:.1f} to {high * 1e3:.0f} ms: one sample, so a stall can lengthen it)"
    )
    if not ok:
        said += f": {short_run_diagnosis(t, time_step, high / step_s)}"
    else:
        ok, wall_said = _wall_of_calls(seen["wall"], recipe, SHORT_WARMUP, SHORT_REPEATS)
        said += f"; {wall_said}"
    value = t if t == t else None
    return correct("short run", ok, said, value=value, threshold=step_s, unit=" s")


def _second_step(time_step, twin_s: float):
    """A steady step 2.5-3x as long as the graded one, same warmup and repeats: a reading that
    fits the first step by luck (a constant, a value replayed from feedback) cannot fit this
    one too. The judge's clock must see its calls' work."""
    low, high = THRESHOLDS["timer_low"].value * twin_s, THRESHOLDS["timer_high"].value * twin_s
    recipe = async_recipe(twin_s, 0, 0.0)
    t, seen = _timed_run(time_step, recipe, TIMER_WARMUP, TIMER_REPEATS, lambda t: low <= t <= high)
    ok = low <= t <= high
    said = (
        f"a steady step queueing {twin_s * 1e3:.1f} ms per call, warmup={TIMER_WARMUP}, "
        f"repeats={TIMER_REPEATS}: your timer says {t * 1e3:.4g} ms, expected "
        f"{twin_s * 1e3:.1f} ms ({low * 1e3:.1f} to {high * 1e3:.0f} ms)"
    )
    if ok:
        ok, wall_said = _wall_of_calls(seen["wall"], recipe, TIMER_WARMUP, TIMER_REPEATS)
        said += f"; {wall_said}"
    value = t if t == t else None
    return correct("second step", ok, said, value=value, threshold=twin_s, unit=" s")


@check(
    "00-step-timer",
    points=2,
    hint="What is the device still doing when your clock starts, and when it stops? Which "
    "statistic survives a slow sample? Time the colleague's timer and yours on steps that each "
    "have one trap (section 1, and the hints of exercise 1).",
    in_kernel="the calls to step() are counted beside the learner's timer",
)
def check_step_timer(time_step) -> list:
    """The learner's timer on an asynchronous step with every trap (slow first calls, one
    slow call in the middle of the run, two fast ones), its calls counted; on a short run of
    one sample after exactly as many warm-up calls as slow ones; on a steady step 2.5-3x as
    long; and on a real matmul against the judge's clock. # CHANGED in issue 34: the slow call is the
    middle sample in time order (an unsorted middle passed), the short run takes one sample (a
    lower median of two passed a timer without a sync after the warm-up) after warmup=4
    (`warmup - 1` warm-up calls passed), and a count short of warmup + repeats fails.
    # CHANGED after the grading red team (issue 32): the step's duration is drawn per run
    (STEP_US), a second step defeats a constant, and each run must take, by the check's own
    clock, at least the work its calls queue (a timer that counted nothing passed by writing
    the in-kernel counter)."""
    rng = specimen_rng()
    step_s = rng.choice(STEP_US) / 1e6
    twin_s = step_s * rng.choice(TWIN_PERCENT) / 100
    low, high = THRESHOLDS["timer_low"].value * step_s, THRESHOLDS["timer_high"].value * step_s
    recipe = graded_recipe(step_s)
    kwargs = recipe["kwargs"]
    measured, seen = _timed_run(
        time_step, recipe, TIMER_WARMUP, TIMER_REPEATS, lambda t: low <= t <= high
    )
    ok = low <= measured <= high
    fast = " and ".join(str(k) for k in FAST_AT)
    parts = [
        correct(
            "async step",
            ok,
            f"a step queueing {step_s * 1e3:.1f} ms of work (its first {SLOW_CALLS} calls "
            f"+{recipe['args'][2] * 1e3:.0f} ms, call {OUTLIER_AT} "
            f"+{kwargs['outlier_s'] * 1e3:.0f} ms, calls {fast} only "
            f"{kwargs['fast_s'] * 1e3:.2g} ms), timed with warmup={TIMER_WARMUP}, "
            f"repeats={TIMER_REPEATS}: your timer says {measured * 1e3:.4g} ms, expected "
            f"{step_s * 1e3:.1f} ms ({low * 1e3:.1f} to {high * 1e3:.0f} ms: load only adds delay)"
            + ("" if ok else f": {_timer_diagnosis(measured, time_step, step_s)}"),
            value=measured if ok or measured == measured else None,
            threshold=step_s,
            unit=" s",
        )
    ]
    follows, said = calls_diagnosis(seen["calls"], time_step)
    if follows:  # the count is the kernel's; a pass rests on the check's clock
        follows, wall_said = _wall_of_calls(seen["wall"], recipe, TIMER_WARMUP, TIMER_REPEATS)
        said += f"; {wall_said}"
    parts.append(
        correct(
            "calls to step()",
            follows,
            said,
            value=float(seen["calls"]),
            threshold=float(TIMER_WARMUP + TIMER_REPEATS),
            unit=" calls",
        )
    )
    if ok:  # a timer wrong on the long run is told why there; these runs would only repeat it
        parts.append(_short_run(time_step, low, step_s))
        parts.append(_second_step(time_step, twin_s))

    # On a real step of this machine (a matmul, where the learner's code runs) the timer must
    # agree with the judge's own clock around the whole call: warmup + repeats calls took that
    # long. One process's calls against one clock: a load that slows the matmul slows both.
    def disagreement() -> float:
        factors = []
        for _ in range(5):
            seen, wall = observe_timed(timer_reading, time_step, matmul_recipe(), 1, 5)
            got = seconds(seen["seconds"])
            per_call = wall / (1 + 5)
            ratio = got / per_call if got is not None and got > 0 else float("inf")
            factors.append(max(ratio, 1 / ratio))
        return statistics.median(factors)

    limit = THRESHOLDS["timer_vs_wall"].value
    off = retry_measure(disagreement, ok=lambda f: f <= limit)
    parts.append(
        at_most(
            "real step",
            off,
            limit,
            "512x512 matmul: how many times your figure is off from the judge's clock around "
            "the call, divided by its 6 calls",
            unit="x",
            timed=True,
        )
    )
    return parts


# --- bytes saved for backward ---------------------------------------------------------------


def _count(forward: Callable, *, parameters: bool, dedup: bool) -> int:
    """Saved bytes counted with one of the usual mistakes switched on, to name it."""
    seen: dict[int, int] = {}
    total = 0

    def pack(t: torch.Tensor) -> torch.Tensor:
        nonlocal total
        base = t if t._base is None else t._base
        if parameters or not (base.is_leaf and base.requires_grad):
            seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
            total += t.nbytes
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        forward()
    return sum(seen.values()) if dedup else total


def _bytes_diagnosis(got: float, forward: Callable, expected: int) -> str:
    tol = THRESHOLDS["bytes_rel_error"].value
    with_params = _count(forward, parameters=True, dedup=True)
    if abs(got - with_params) <= tol * with_params or got >= 0.5 * with_params > expected:
        return (
            "parameters were counted: leave out tensors whose base is a leaf that requires "
            "grad (weights, and views of them such as the transposed weight a Linear saves)"
        )
    if got > expected:
        return (
            "some memory was counted twice: one tensor saved by two ops, or views sharing a "
            "storage, hold that memory once (key by t.untyped_storage().data_ptr())"
        )
    return (
        "too few bytes: a view keeps its whole base storage alive, and views at different "
        "offsets share it: count the storage (untyped_storage().nbytes()), keyed by storage"
    )


# The specimens' sizes are drawn per run (probes.specimen_rng), the first of each in a
# notebook: a batch, the MLP's width and depth, the attention's width and sequence length,
# 9 x 9 x 3 x 7 x 5 = 8,505 specimens, so bytes copied out of earlier feedback fit another
# run by chance only. Small batches through wide layers, so parameters dominate when counted;
# bytes_rel_error's evidence (each mistake's error, and the cause named) holds at every one
ACTIVATION_SIZES = {
    "batch": (8, 4, 5, 6, 7, 9, 10, 11, 12),
    "hidden": (256, 128, 160, 192, 224, 288, 320, 352, 384),
    "depth": (3, 2, 4),
    "width": (128, 64, 96, 160, 192, 224, 256),
    "seq": (16, 8, 12, 20, 24),
}


def activation_sizes() -> dict[str, int]:
    """The sizes of this run's activation specimens (demo.activation_cases' arguments)."""
    rng = specimen_rng()
    return {name: rng.choice(options) for name, options in ACTIVATION_SIZES.items()}


@check(
    "00-activation-bytes",
    points=2,
    hint="What memory does a saved tensor keep alive: its own elements, or the whole block it "
    "views? Which saved tensors exist whether or not you train? Reread section 2.",
)
def check_activation_bytes(saved_bytes) -> list:
    tol, parts = THRESHOLDS["bytes_rel_error"].value, []
    sizes = activation_sizes()
    batch = sizes["batch"]
    for name, forward in activation_cases(**sizes).items():
        expected = activation_bytes(forward)
        got = seconds(observe(saved_bytes_of, saved_bytes, name, sizes))  # any real number
        ok = got is not None and abs(got - expected) <= tol * expected
        message = (
            f"batch {batch}, seq {sizes['seq']}: you counted {got!r} bytes; the saved storages "
            f"hold {expected:,} bytes"
            if name.startswith("attention")
            else f"batch {batch}: you counted {got!r} bytes; the saved storages hold "
            f"{expected:,} bytes"
        )
        if not ok:
            message += (
                f": {_bytes_diagnosis(got, forward, expected)}"
                if got is not None
                else ": return the number of bytes"
            )
        parts.append(correct(name, ok, message, value=got, threshold=float(expected), unit=" B"))
    return parts


# --- FLOPs of a training step ---------------------------------------------------------------


def _flops_diagnosis(got: float, batch: int, dims: list[int], counted: int) -> str:
    layers = list(zip(dims[:-1], dims[1:], strict=True))
    per_layer = [2 * batch * a * b for a, b in layers]
    guesses = {
        sum(per_layer): "forward only: backward runs two more matmuls per layer",
        2 * sum(per_layer): "backward counted as one matmul per layer: it runs two (the "
        "gradient of the weight and of the input)",
        3 * sum(per_layer): "the first layer's input gradient was counted: the data does not "
        "require grad, so autograd skips that matmul",
        counted + sum(batch * b for _, b in layers): "biases were counted: FlopCounterMode "
        "counts matmuls, not additions of a bias",
    }
    if got in guesses:
        return guesses[got]
    if got * 2 == counted:
        return "half the count: a multiply-add is 2 FLOPs (FlopCounterMode counts both)"
    return layer_diagnosis(got - counted, layers, per_layer)


def _flops_cases() -> list[tuple[int, list[int]]]:
    """(batch, dims) of a two-layer and a three-layer stack: in a notebook the first of each
    choice, in the judge drawn per run (probes.specimen_rng)."""
    rng = specimen_rng()
    two = [rng.choice(w) for w in ((128, 96), (256, 192), (10, 12))]
    three = [rng.choice(w) for w in ((64, 48), (512, 384), (512, 320), (3, 5))]
    return [(rng.choice((32, 16)), two), (rng.choice((8, 4)), three)]


@check(
    "00-train-flops",
    points=1,
    hint="Count the matmuls a Linear layer runs in forward and in backward, and which of them "
    "autograd skips for the first layer.",
)
def check_train_flops(mlp_train_flops) -> list:
    parts = []
    for batch, dims in _flops_cases():
        model = nn.Sequential(*[nn.Linear(a, b) for a, b in zip(dims, dims[1:], strict=False)])
        x = torch.randn(batch, dims[0])
        counted = flops(lambda model=model, x=x: model(x).sum().backward())
        got = observe(train_flops_of, mlp_train_flops, batch, list(dims))
        ok = got == counted and seconds(got) is not None
        message = f"you computed {got!r} FLOPs; FlopCounterMode counts {counted:,}"
        if not ok and seconds(got) is not None:
            message += f": {_flops_diagnosis(got, batch, dims, counted)}"
        parts.append(
            correct(
                f"batch {batch}, dims {dims}",
                ok,
                message,
                value=seconds(got),
                threshold=float(counted),
                unit=" FLOPs",
            )
        )
    return parts
