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
from ...measure import flops, time_fn
from ...memory import activation_bytes
from ...probes import LearnerRaised, observe, specimen_rng
from .demo import activation_cases
from .diagnosis import (
    calls_diagnosis,
    layer_diagnosis,
    read_timer,
    seconds,
    short_run_diagnosis,
    timer_diagnosis,
)
from .probes import (
    FAST_AT,
    FAST_S,
    GRADED,
    OUTLIER_AT,
    OUTLIER_S,
    REAL_STEP_SIZE,
    SHORT_REPEATS,
    SHORT_WARMUP,
    SLOW_CALLS,
    SLOW_S,
    STEP_S,
    TIMER_REPEATS,
    TIMER_WARMUP,
    async_recipe,
    matmul_recipe,
    real_step,
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
        "the middle sample unsorted or the maximum 230 ms (7.7x), milliseconds 1000x",
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
    "timer_vs_time_fn": Threshold(
        0.35,
        "512x512 matmul, learner timer / time_fn, median of 5 interleaved ratios: the reference "
        "was within 0.003-0.020 (n=6, 2-core cpu-bf16 VM at load ~11), 0.17 at worst in the "
        "test runs; milliseconds is off by 1000x",
        measured_on=("cpu-bf16",),
    ),
    "bytes_rel_error": Threshold(
        0.01,
        "valid counts differ only by the 4-byte total_weight scalar nll_loss saves (0.015% of "
        "the MLP case); parameters counted +1900%, double counting +54..92%, views keyed by "
        "tensor address -15% (measured with torch 2.14 on CPU)",
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
        "load ~10)",
        measured_on=("cpu-bf16",),
    ),
}


def _timer_diagnosis(t: float, time_step) -> str:
    return timer_diagnosis(
        t,
        time_step,
        THRESHOLDS["timer_low"].value,
        THRESHOLDS["timer_high"].value,
        THRESHOLDS["fastest_sample"].value,
    )


def _short_run(time_step, low: float):
    """The step with its slow first calls only, timed with warmup=SHORT_WARMUP (exactly those
    calls) and a single repeat: a timer that starts its first clock reading before the
    warm-up's queued work has finished has that work in its only sample, whatever statistic it
    takes; one that warms up fewer times than `warmup` times a slow call; one that drops its
    first sample has none left. No slow call after the warm-up: a timer with one untimed extra
    call (the count passes it) would meet it. One sample has no median to shield it from a
    stall, hence its own, wider limit (`single_high`)."""
    high = THRESHOLDS["single_high"].value * STEP_S
    raised: list[LearnerRaised] = []

    def measure() -> float:
        try:
            return read_timer(
                time_step,
                async_recipe(STEP_S, SLOW_CALLS, SLOW_S),
                repeats=SHORT_REPEATS,
                warmup=SHORT_WARMUP,
            )
        except LearnerRaised as exc:  # the learner's error is the reading: no retry helps
            raised.append(exc)
            return float("inf")

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
        f"{run}: your timer says {t * 1e3:.4g} ms, expected {STEP_S * 1e3:.0f} ms "
        f"({low * 1e3:.1f} to {high * 1e3:.0f} ms: one sample, so a stall can lengthen it)"
    )
    if not ok:
        said += f": {short_run_diagnosis(t, time_step, high / STEP_S)}"
    value = t if t == t else None
    return correct("short run", ok, said, value=value, threshold=STEP_S, unit=" s")


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
    one sample after exactly as many warm-up calls as slow ones; and on a real matmul against
    time_fn. # CHANGED in issue 34: the slow call is the middle sample in time order (an
    unsorted middle passed), the short run takes one sample (a lower median of two passed a
    timer without a sync after the warm-up) after warmup=4 (`warmup - 1` warm-up calls
    passed), and a count short of warmup + repeats fails."""
    low, high = THRESHOLDS["timer_low"].value * STEP_S, THRESHOLDS["timer_high"].value * STEP_S

    calls: list[int] = [0]  # calls to step() in the last attempt

    def measure() -> float:
        seen = observe(timer_reading, time_step, GRADED, TIMER_WARMUP, TIMER_REPEATS)
        calls[0] = int(seen["calls"])
        t = seconds(seen["seconds"])
        return t if t is not None else float("nan")

    measured = retry_measure(measure, ok=lambda t: low <= t <= high)
    ok = low <= measured <= high
    fast = " and ".join(str(k) for k in FAST_AT)
    parts = [
        correct(
            "async step",
            ok,
            f"a step queueing {STEP_S * 1e3:.0f} ms of work (its first {SLOW_CALLS} calls "
            f"+{SLOW_S * 1e3:.0f} ms, call {OUTLIER_AT} +{OUTLIER_S * 1e3:.0f} ms, calls {fast} "
            f"only {FAST_S * 1e3:.0f} ms), timed with warmup={TIMER_WARMUP}, "
            f"repeats={TIMER_REPEATS}: your timer says {measured * 1e3:.4g} ms, expected "
            f"{STEP_S * 1e3:.0f} ms ({low * 1e3:.1f} to {high * 1e3:.0f} ms: load only adds delay)"
            + ("" if ok else f": {_timer_diagnosis(measured, time_step)}"),
            value=measured if ok or measured == measured else None,
            threshold=STEP_S,
            unit=" s",
        )
    ]
    follows, said = calls_diagnosis(calls[0], time_step)
    parts.append(
        correct(
            "calls to step()",
            follows,
            said,
            value=float(calls[0]),
            threshold=float(TIMER_WARMUP + TIMER_REPEATS),
            unit=" calls",
        )
    )
    if ok:  # a timer wrong on the long run is told why there; this run would only repeat it
        parts.append(_short_run(time_step, low))
    # On a real step of this machine the timer must agree with the harness, which times the
    # same matmul here (in the judge, under `course grade`). The two alternate, so a change
    # in machine load hits both alike.
    mine = real_step(REAL_STEP_SIZE)

    def disagreement() -> float:
        ratios = []
        for _ in range(5):
            ref = time_fn(mine, warmup=1, repeats=5, min_sample_s=0).median
            seen = observe(timer_reading, time_step, matmul_recipe(), 1, 5)
            got = seconds(seen["seconds"])
            ratios.append(got / ref if got is not None else float("inf"))
        return abs(statistics.median(ratios) - 1)

    limit = THRESHOLDS["timer_vs_time_fn"].value
    err = retry_measure(disagreement, ok=lambda e: e <= limit)
    parts.append(
        at_most(
            "real step",
            err,
            limit,
            "relative difference from cu.time_fn, 512x512 matmul",
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


# the MLP's batch is drawn from these (probes.specimen_rng): small, so parameters dominate
# when counted, and the evidence of bytes_rel_error holds at each
ACTIVATION_BATCHES = (8, 6, 10)  # the first in a notebook


@check(
    "00-activation-bytes",
    points=2,
    hint="What memory does a saved tensor keep alive: its own elements, or the whole block it "
    "views? Which saved tensors exist whether or not you train? Reread section 2.",
)
def check_activation_bytes(saved_bytes) -> list:
    tol, parts = THRESHOLDS["bytes_rel_error"].value, []
    batch = specimen_rng().choice(ACTIVATION_BATCHES)
    for name, forward in activation_cases(batch).items():
        expected = activation_bytes(forward)
        got = seconds(observe(saved_bytes_of, saved_bytes, name, batch))  # any real number
        ok = got is not None and abs(got - expected) <= tol * expected
        message = (
            f"batch {batch}: you counted {got!r} bytes; the saved storages hold {expected:,} bytes"
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
