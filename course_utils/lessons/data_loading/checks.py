"""Lesson 03's checks and thresholds. They observe what happened: seconds the device and the
dataset really spent, which processes loaded which items in which order, bytes that crossed
to the device, and values that arrived; the loader's speed where this machine can show one.
Exercise 1's check is in profile_check.py, 3's in transfer_check.py, 4's in
normalise_check.py; exercise 2's is here."""

from __future__ import annotations

import time
import uuid

import torch

from ...checks import (
    Threshold,
    at_least,
    check,
    correct,
    not_applicable,
    retry_measure,
)
from ...device import get_device
from ...measure import compare
from ...mode import pick
from ...probes import LearnerRaised, observe
from .demo import BATCH, decode_heavy, plain_loader, run_epoch, usable_cpus
from .loader_parts import loader_parts
from .normalise_check import THRESHOLDS as NORMALISE_THRESHOLDS
from .observe import loader_closed, loader_epoch, loader_seen
from .probes import no_parallel_reason, parallel_speedup

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

# --- exercise 2: fix the loader --------------------------------------------------------------------


@check(
    "03-fast-loader",
    points=3,
    hint="Reread Exercise 2 and your sweep: for each argument of slow_loader, ask what it "
    "assumes about the machine (GPUs, CPUs, how workers start) and in which process, and how "
    "often, its work runs. The torch.utils.data docs (multi-process loading, platform-specific "
    "behaviours, memory pinning) say what each argument does.",
    in_kernel="which processes loaded each item, the worker processes alive after an epoch, "
    "what pickles as under spawn and the pin_memory() calls of a collate are read beside the "
    "learner's loader",
)
def check_fast_loader(make_loader) -> list:
    device, images = get_device(), decode_heavy()  # the kernel builds the same images
    seen = observe(loader_seen, make_loader, len(images), str(device))
    n = len(images) - BATCH // 2 - 1  # observe.traced_images: a partial last batch
    parts = loader_parts(seen, n, BATCH, usable_cpus())
    if any(p.status == "failed" for p in parts):
        return parts  # wrong already: nothing worth timing
    return [*parts, _speed_part(make_loader, device, images, seen.get("num_workers"))]


def _speed_part(make_loader, device: torch.device, dataset, num_workers):
    """Epochs of the learner's loader (in its kernel) against num_workers=0 (here), both timed
    here in interleaved pairs; each of the learner's epochs must deliver the whole data set."""
    least, expected = THRESHOLDS["min_parallel"].value, THRESHOLDS["speedup"].value
    parallel = parallel_speedup()
    if parallel < least:
        time.sleep(1.0)  # a burst of other work may pass: look once more
        parallel = max(parallel, parallel_speedup())
    if parallel < least:
        return not_applicable("speed", f"{no_parallel_reason(parallel, least)}; not timed")
    n_images, baseline, runs, key = len(dataset), plain_loader(dataset, BATCH), [], uuid.uuid4().hex
    work = {"samples": len(dataset), "labels": sum(int(t) for t in dataset.targets)}
    delivered: list[dict] = []

    def epoch() -> None:
        delivered.append(observe(loader_epoch, make_loader, key, n_images, str(device)))

    def needed(parallel: float) -> float:
        return min(expected, 1 + GAIN_SHARE * (parallel - 1))

    def measure() -> float:
        if runs:
            time.sleep(1.0)  # let a burst of other work on a shared machine pass first
        before = parallel_speedup()
        res = compare(lambda: run_epoch(baseline), epoch, warmup=1, repeats=pick(quick=5, full=7))
        runs.append((res, min(before, parallel_speedup())))  # the busier moment counts
        return res.speedup

    try:
        retry_measure(
            measure, ok=lambda s: runs[-1][1] < least or s >= needed(runs[-1][1]), attempts=4
        )
    finally:
        try:
            observe(loader_closed, make_loader, key)
        except LearnerRaised:
            pass  # its workers stop with the kernel; the verdict stands on what was measured
    short = [d for d in delivered if d != work]
    if short:
        said = (
            f"an epoch of your loader delivered {short[0].get('samples')} samples (label sum "
            f"{short[0].get('labels')}); the data set has {work['samples']} (label sum "
            f"{work['labels']}): each epoch must deliver every sample once"
        )
        return correct("speed", False, said)
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
    if part.status == "failed" and num_workers == 1:
        part.message += (
            ": with num_workers=1 one process decodes, as the main process did alone, and "
            "this epoch only loads; here two cores were free, so take the knee of your sweep "
            "(at least 2 where it shows 2 faster)"
        )
    return part
