"""Blind red team, round v4, for 00-step-timer (diagnose and fix a colleague's step timer).

Written from notebooks/00_measuring.ipynb (hints folded first, then opened), the solution
notebook, `lesson.make_async_step` (demo.py), `course_utils/measure.py` and the generic check
API only; never the lesson's checks.py, probes.py or its tests.

What the notebook says the check does: a simulated asynchronous step (30 ms queued per call,
150 ms more on its first 4 calls, one slow call after the warm-up), `warmup=6` and more than one
number of repeats, and a real matrix multiply that must agree with `cu.time_fn`.

Each case is a learner's `time_step(step, synchronize, warmup=3, repeats=10)` with the verdict it
deserves and, for a wrong one, the cause the failing parts must name and causes they must not
name (case-insensitive regexes).
"""

from __future__ import annotations

import statistics
import time

import numpy as np
import pytest
import torch
from redteam_helpers import assert_verdict, in_ci, run_check

from course_utils.lessons import measuring as lesson

# What a failing part blames. Every failing part starts with what was timed ("... timed with
# warmup=6, repeats=7: your timer says N ms, expected 30 ms"), so a cause is a phrase that blames,
# never a bare word such as "warm", "ms" or "mean" (the first run's regexes were, and matched
# that description: corrected, see the report).
DRAIN = (
    r"queued work|synchroni[sz]e\(\) after the warm-up|wait for the warm-up|warm-up.{0,30}finish"
)
LAUNCH = r"the launch|synchroni[sz]e\(\) after (each |the )?step|no synchroni[sz]"
MEAN = r"a mean|an outlier|median of the samples|use the median"
WARM = (
    r"one-off cost|`?warmup`? times|skip(ped)? the warm-up|no warm-up"
    r"|warm-up (calls )?(are|were) (timed|counted|in your samples)"
)
UNITS = r"milliseconds|return seconds"
PER_CALL = r"per call, not the total|\(repeats\) x"
CLOCK = r"clock misses|wall clock|process_time"
MEDIAN_NOT_MIN = r"\bmin(imum)?\b|fastest|median"
REPEATS = r"`?repeats`? (argument|samples)|ignor\w+ `?repeats|number of (samples|calls)"


# --- wrong answers ---------------------------------------------------------------------------


def median_only(step, synchronize, warmup=3, repeats=10):
    """Fixes the statistic only: the warm-up's queued work still lands in the first sample
    (with 1 or 2 repeats the median cannot hide it)."""
    for _ in range(warmup):
        step()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        synchronize()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def sync_only(step, synchronize, warmup=3, repeats=10):
    """Fixes the drain after the warm-up only: the mean still counts the slow call."""
    for _ in range(warmup):
        step()
    synchronize()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        synchronize()
        samples.append(time.perf_counter() - start)
    return sum(samples) / len(samples)


def sync_before_not_after(step, synchronize, warmup=3, repeats=10):
    """Synchronises before starting the clock, not after the step: times the launch."""
    for _ in range(warmup):
        step()
    samples = []
    for _ in range(repeats):
        synchronize()
        start = time.perf_counter()
        step()
        samples.append(time.perf_counter() - start)
    synchronize()
    return statistics.median(samples)


def one_sync_after_all(step, synchronize, warmup=3, repeats=10):
    """Warm-up drained, then one clock around all repeats and one sync at the end: the
    total / repeats is a mean, and counts the slow call."""
    for _ in range(warmup):
        step()
    synchronize()
    start = time.perf_counter()
    for _ in range(repeats):
        step()
    synchronize()
    return (time.perf_counter() - start) / repeats


def no_warmup(step, synchronize, warmup=3, repeats=10):
    """Drops the warm-up (sync and median kept): the one-off calls are samples."""
    samples = []
    for _ in range(repeats):
        synchronize()
        start = time.perf_counter()
        step()
        synchronize()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def warmup_hardcoded(step, synchronize, warmup=3, repeats=10):
    """Ignores the `warmup` argument: always 3 calls (the default), so with warmup=6 the 4th
    one-off call is timed."""
    for _ in range(3):
        step()
    synchronize()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        synchronize()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def warmup_in_samples(step, synchronize, warmup=3, repeats=10):
    """Times the warm-up calls too ("more samples is better") and takes their median."""
    samples = []
    for _ in range(warmup + repeats):
        synchronize()
        start = time.perf_counter()
        step()
        synchronize()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def returns_ms(step, synchronize, warmup=3, repeats=10):
    """The reference timer, in milliseconds."""
    for _ in range(warmup):
        step()
    synchronize()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        synchronize()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e3


def returns_total(step, synchronize, warmup=3, repeats=10):
    """Sums the samples (median-free, the outlier counted too): seconds for all repeats, not
    per call."""
    for _ in range(warmup):
        step()
    synchronize()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        synchronize()
        samples.append(time.perf_counter() - start)
    return sum(samples)


def process_time_clock(step, synchronize, warmup=3, repeats=10):
    """Right structure, wrong clock: process_time counts CPU time, not the waiting in
    synchronize()."""
    for _ in range(warmup):
        step()
    synchronize()
    samples = []
    for _ in range(repeats):
        start = time.process_time()
        step()
        synchronize()
        samples.append(time.process_time() - start)
    return statistics.median(samples)


def minimum(step, synchronize, warmup=3, repeats=10):
    """Everything right but the statistic: the fastest sample (the docstring asks the
    median; under load the minimum reads the luckiest call, not the steady state)."""
    for _ in range(warmup):
        step()
    synchronize()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        synchronize()
        samples.append(time.perf_counter() - start)
    return min(samples)


def fixed_repeats(step, synchronize, warmup=3, repeats=10):
    """Ignores the `repeats` argument: always 5 samples."""
    for _ in range(warmup):
        step()
    synchronize()
    samples = []
    for _ in range(5):
        start = time.perf_counter()
        step()
        synchronize()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


# --- valid alternatives ----------------------------------------------------------------------


def ns_statistics_median(step, synchronize, warmup=3, repeats=10):
    """perf_counter_ns, a sync before and after each sample (as cu.time_fn), statistics."""
    for _ in range(warmup):
        step()
    samples = []
    for _ in range(repeats):
        synchronize()
        start = time.perf_counter_ns()
        step()
        synchronize()
        samples.append(time.perf_counter_ns() - start)
    return statistics.median(samples) / 1e9


def torch_median_sync_every_warmup(step, synchronize, warmup=3, repeats=10):
    """Synchronises after every warm-up call; torch's median (the lower middle value)."""
    for _ in range(warmup):
        step()
        synchronize()
    samples = torch.empty(repeats, dtype=torch.float64)
    for i in range(repeats):
        start = time.perf_counter()
        step()
        synchronize()
        samples[i] = time.perf_counter() - start
    return samples.median().item()


def timed_helper_numpy(step, synchronize, warmup=3, repeats=10):
    """A `_timed`-like helper (sync, clock, call, sync, clock) on time.monotonic_ns, numpy's
    median."""

    def timed():
        synchronize()
        t0 = time.monotonic_ns()
        step()
        synchronize()
        return (time.monotonic_ns() - t0) * 1e-9

    for _ in range(warmup):
        step()
    return float(np.median([timed() for _ in range(repeats)]))


def upper_median_by_sorting(step, synchronize, warmup=3, repeats=10):
    """The notebook's own `sorted(xs)[len(xs) // 2]` (the upper median for an even count)."""
    for _ in range(warmup):
        step()
    synchronize()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        synchronize()
        samples.append(time.perf_counter() - start)
    return sorted(samples)[len(samples) // 2]


# (function, expected, cause that must be named, causes that must not be named)
CASES = [
    ("wrong-median_only", median_only, "failed", DRAIN, (MEAN, LAUNCH, CLOCK, PER_CALL)),
    ("wrong-sync_only", sync_only, "failed", MEAN, (DRAIN, LAUNCH, WARM, CLOCK, UNITS)),
    ("wrong-sync_before_not_after", sync_before_not_after, "failed", LAUNCH, (MEAN, WARM, UNITS)),
    ("wrong-one_sync_after_all", one_sync_after_all, "failed", MEAN, (DRAIN, WARM, CLOCK, UNITS)),
    ("wrong-no_warmup", no_warmup, "failed", WARM, (MEAN, DRAIN, LAUNCH, CLOCK, UNITS)),
    ("wrong-warmup_hardcoded", warmup_hardcoded, "failed", WARM, (MEAN, DRAIN, LAUNCH, CLOCK)),
    ("wrong-warmup_in_samples", warmup_in_samples, "failed", WARM, (MEAN, DRAIN, LAUNCH, CLOCK)),
    ("wrong-returns_ms", returns_ms, "failed", UNITS, (MEAN, DRAIN, LAUNCH, WARM, PER_CALL)),
    ("wrong-returns_total", returns_total, "failed", PER_CALL, (DRAIN, LAUNCH, WARM, UNITS)),
    ("wrong-process_time_clock", process_time_clock, "failed", CLOCK, (LAUNCH, DRAIN, MEAN, WARM)),
    ("wrong-minimum", minimum, "failed", MEDIAN_NOT_MIN, (DRAIN, LAUNCH, WARM, UNITS)),
    ("wrong-fixed_repeats", fixed_repeats, "failed", REPEATS, (DRAIN, LAUNCH, MEAN, UNITS)),
    ("valid-ns_statistics_median", ns_statistics_median, "passed", None, ()),
    ("valid-torch_median_sync_every_warmup", torch_median_sync_every_warmup, "passed", None, ()),
    ("valid-timed_helper_numpy", timed_helper_numpy, "passed", None, ()),
    ("valid-upper_median_by_sorting", upper_median_by_sorting, "passed", None, ()),
]

PARAMS = in_ci(
    [pytest.param(fn, exp, cause, nots, id=i) for i, fn, exp, cause, nots in CASES],
    keep={"wrong-median_only", "valid-ns_statistics_median"},
)


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("fn, expected, cause, not_causes", PARAMS)
def test_step_timer(fn, expected, cause, not_causes):
    verdict = run_check(lesson.check_step_timer, fn)
    print(f"{verdict.status}: {verdict.message}")
    assert_verdict(verdict, expected, cause, not_causes)
