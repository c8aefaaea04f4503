"""Lesson 03's checks. They observe what happened: seconds the device and the dataset really
spent, which processes loaded which items in which order, bytes that crossed to the device,
and values that arrived; the loader's speed where this machine can show one."""

from __future__ import annotations

import time
from collections.abc import Callable

import torch
from torch.utils.data import DataLoader, Subset

from ...checks import (
    Threshold,
    at_least,
    check,
    correct,
    not_applicable,
    retry_measure,
)
from ...data import close_loader
from ...device import get_device
from ...measure import compare
from ...mode import pick
from .demo import (
    BATCH,
    SCENARIOS,
    EpochProfile,
    SimulatedTrainer,
    SleepyData,
    Traced,
    decode_heavy,
    plain_loader,
    run_epoch,
)
from .normalise_check import THRESHOLDS as NORMALISE_THRESHOLDS
from .observe import observe_loader
from .probes import (
    Bookended,
    no_parallel_reason,
    parallel_speedup,
)

THRESHOLDS = {
    "profile_error": Threshold(
        0.25,
        "the share of the dataset's measured loading time, or of the device's measured busy "
        "time, that a profile may miss (plus 10 ms); the epoch's wall time bounds each from "
        "above. The reference's data_s is within 5.3% (data-bound) and 21.5% (compute-bound, "
        "24 ms of loading) of the loading time over 10 runs at load average 12 on 2 cores "
        "(cpu-bf16); its compute_s exceeded the device time by up to 0.15 s there (thread "
        "wake-ups), hence no upper bound from the device time. No synchronisation bills ~0 s "
        "to the steps, CPU time ~0 s to both",
        measured_on=("cpu-bf16",),
    ),
    "edge_s": Threshold(
        0.15,
        "seconds the 'slow start and end' scenario waits before its first batch (as workers "
        "start) and after its last: 0.15 s of 0.34 s of loading, so a profile that misses either "
        "misses 44%, past profile_error's 25% + 10 ms",
    ),
    "min_parallel": Threshold(
        1.5,
        "two threads of sha256 run < 1.5x as fast as one: no loader can show a speedup",
        measured_on=(),
    ),
    "speedup": Threshold(
        1.5,
        "2 workers over num_workers=0 on decode-heavy data: 1.55-1.72x on an idle 2-core CPU "
        "(measured for the previous version of this check, n=8); scaled down to 1 + 0.3 of the "
        "measured parallel gain (GAIN_SHARE) when two threads run 1.5-2x as fast as one",
        measured_on=("cpu-bf16",),
    ),
    **NORMALISE_THRESHOLDS,  # exercise 4, check 03-normalise (normalise_check.py)
}

# What share of the two-thread gain two workers must show. Valid loaders reached 0.45-0.95 of it:
# 1.42-1.71x beside 1.74-1.90x on an idle 2-core dev machine (2026-12-03, n=6), and
# 1.31x beside 1.69x, four attempts in a row, on the 2-core CI machine, whose shorter epoch
# (0.20 s) gives the workers' start-up and hand-off a larger share. One worker measures 0.9x and
# no workers 1.0x: both stay below 1 + 0.3 of any gain of at least 0.5.
GAIN_SHARE = 0.3

# --- exercise 1: is the step data-bound? ------------------------------------------------------


def _as_profile(result) -> EpochProfile:
    if isinstance(result, EpochProfile):
        return result
    if isinstance(result, dict) and {"data_s", "compute_s"} <= set(result):
        return EpochProfile(float(result["data_s"]), float(result["compute_s"]))
    if isinstance(result, tuple | list) and len(result) == 2:
        return EpochProfile(float(result[0]), float(result[1]))
    raise TypeError(f"profile_epoch must return an EpochProfile, got {type(result).__name__}")


@check(
    "03-profile",
    points=1,
    hint="Reread 'Baseline' and lesson 00's synchronised timing: when step() returns, has the "
    "work it queued finished? Split the epoch into waiting and computing with wall-clock "
    "readings, and ask which clock reading the waits before the first batch and after the last "
    "one fall between.",
)
def check_profile(profile_epoch: Callable) -> list:
    missed, edge = THRESHOLDS["profile_error"].value, THRESHOLDS["edge_s"].value
    parts = []
    scenarios = {**SCENARIOS, "slow start and end": (0.0002, 0.002, True)}
    for name, (item_s, step_s, bound) in scenarios.items():
        data = SleepyData(96, item_s)  # 12 batches of 8
        device = SimulatedTrainer(step_s)
        edges = edge if name == "slow start and end" else 0.0
        loader = Bookended(DataLoader(data, batch_size=8), edges, data)
        try:
            device.synchronize()
            t0 = time.perf_counter()
            got = _as_profile(profile_epoch(loader, device.step, device.synchronize))
            device.synchronize()
            wall = time.perf_counter() - t0
        finally:
            device.close()
        ok = _consistent(got, data.loading_s, device.busy_s, wall, missed)
        msg = (
            f"yours: {got.data_s:.3f} s waiting, {got.compute_s:.3f} s computing; measured: the "
            f"dataset loaded for {data.loading_s:.3f} s, the device worked {device.busy_s:.3f} s, "
            f"the epoch took {wall:.3f} s ({'data' if bound else 'compute'}-bound)"
        )
        why = "" if ok else _why_profile(got, data.loading_s, device.busy_s, edges)
        parts.append(correct(f"{name} step", ok, msg + why))
    return parts


def _consistent(got: EpochProfile, loading: float, busy: float, wall: float, missed: float) -> bool:
    """Waiting covers at least the loading, computing at least the device's work (each may
    miss `missed` of it, plus 10 ms), and neither takes time the other certainly used. On a
    loaded machine a correct profiler bills thread wake-ups to the step: the upper bounds,
    from the epoch's wall time, leave room for that."""
    slack = 0.01
    low_data, low_compute = (1 - missed) * loading - slack, (1 - missed) * busy - slack
    return (
        low_data <= got.data_s <= wall - low_compute
        and low_compute <= got.compute_s <= wall - low_data
        and got.total_s <= wall * 1.1 + slack
    )


def _why_profile(got: EpochProfile, loading: float, busy: float, edge_s: float = 0.0) -> str:
    """Name the likely mistake: each leaves its own signature in the two numbers."""
    near = lambda a, b: abs(a - b) <= 0.25 * b + 0.01  # noqa: E731
    if edge_s and near(got.compute_s, busy) and abs(got.data_s - (loading - edge_s)) < edge_s / 2:
        return (
            f" (about {edge_s:.2f} s of waiting is missing: this loader waits that long before its "
            "first batch and again after its last; start the clock before the loop and read it "
            "once more when the loop ends)"
        )
    if near(got.data_s, busy) and near(got.compute_s, loading):
        return " (the two are swapped)"
    if got.data_s < 0.5 * loading and got.compute_s < 0.5 * busy:
        return " (both far too small: sleeping and waiting use no CPU time; use time.perf_counter)"
    if got.compute_s < 0.5 * busy:
        return (
            " (the step's device work was not billed to the step: synchronize() before "
            "reading the clock after it)"
        )
    if near(got.compute_s, busy):
        return (
            " (the computing is right; waiting is from the end of a step to the next batch, "
            "and after the last)"
        )
    return ""


# --- exercise 2: fix the loader --------------------------------------------------------------------


@check(
    "03-fast-loader",
    points=3,
    hint="Reread Exercise 2 and your sweep: for each argument of slow_loader, ask what it "
    "assumes about the machine (GPUs, CPUs, how workers start) and in which process, and how "
    "often, its work runs. The torch.utils.data docs (multi-process loading, platform-specific "
    "behaviours, memory pinning) say what each argument does.",
)
def check_fast_loader(make_loader: Callable) -> list:
    device = get_device()
    images = decode_heavy()
    dataset = Traced(Subset(images, range(len(images) - BATCH // 2 - 1)))  # a partial last batch
    loader = make_loader(dataset, BATCH, device)
    try:
        parts = observe_loader(loader, dataset, make_loader)
    finally:
        close_loader(loader)
    if any(p.status == "failed" for p in parts):
        return parts  # wrong already: nothing worth timing
    return [*parts, _speed_part(make_loader, device)]


def _speed_part(make_loader: Callable, device: torch.device):
    least, expected = THRESHOLDS["min_parallel"].value, THRESHOLDS["speedup"].value
    parallel = parallel_speedup()
    if parallel < least:
        time.sleep(1.0)  # a burst of other work may pass: look once more
        parallel = max(parallel, parallel_speedup())
    if parallel < least:
        return not_applicable("speed", f"{no_parallel_reason(parallel, least)}; not timed")
    dataset = decode_heavy()
    loader, baseline, runs = make_loader(dataset, BATCH, device), plain_loader(dataset, BATCH), []

    def needed(parallel: float) -> float:
        return min(expected, 1 + GAIN_SHARE * (parallel - 1))

    def measure() -> float:
        if runs:
            time.sleep(1.0)  # let a burst of other work on a shared machine pass first
        before = parallel_speedup()
        res = compare(
            lambda: run_epoch(baseline),
            lambda: run_epoch(loader),
            warmup=1,
            repeats=pick(quick=5, full=7),
        )
        runs.append((res, min(before, parallel_speedup())))  # the busier moment counts
        return res.speedup

    try:
        retry_measure(
            measure, ok=lambda s: runs[-1][1] < least or s >= needed(runs[-1][1]), attempts=4
        )
    finally:
        close_loader(loader)
    res, parallel = runs[-1]
    what = (
        f"epoch speedup over num_workers=0 ({res.baseline.median:.2f} s -> "
        f"{res.candidate.median:.2f} s, {len(res.ratios)} interleaved pairs; two threads of CPU "
        f"work ran {parallel:.2f}x as fast as one)"
    )
    reason = f"two threads ran under {least}x as fast as one: the CPU is busy or has one core"
    part = at_least(
        "speed", res.speedup, needed(parallel), what, applies=parallel >= least, reason=reason
    )
    if part.status == "failed" and getattr(loader, "num_workers", None) == 1:
        part.message += (
            ": with num_workers=1 one process decodes, as the main process did alone, and "
            "this epoch only loads; here two cores were free, so take the knee of your sweep "
            "(at least 2 where it shows 2 faster)"
        )
    return part
