"""course_utils.measure: timings keep raw samples, comparisons read true ratios, and FLOP
counts equal what can be worked out by hand.

The timing tests run on a 2-core machine shared with other jobs. They stay honest there by
timing single-threaded kernels in short samples (a sample shorter than the scheduler's time
slice is rarely pre-empted, and the median ignores the few that are) and by repeating the
whole measurement a few times and taking the median.
"""

from __future__ import annotations

import random
import statistics
import time

import pytest
import torch
from torch import nn
from torch.utils.benchmark import Timer

import course_utils.measure as measure
from course_utils.measure import (
    NOISY,
    Comparison,
    Throughput,
    Timing,
    compare,
    flops,
    mfu,
    throughput,
    time_fn,
)
from course_utils.models import MLP

CPU = torch.device("cpu")

# Every test here times on one thread: with two threads on a loaded 2-core machine, even a
# 32x32 matmul can take 40 ms (one thread waits at a barrier for the other to be scheduled).
pytestmark = pytest.mark.usefixtures("one_thread")


def matmul_loop(n: int, size: int = 128):
    """A function doing `n` identical matmuls: twice `n`, twice the work, no other cost."""
    a, b, out = torch.randn(size, size), torch.randn(size, size), torch.empty(size, size)

    def run():
        for _ in range(n):
            torch.mm(a, b, out=out)

    return run


# --- time_fn and Timing ---------------------------------------------------------------------


def test_time_fn_keeps_raw_samples_and_derives_median_and_iqr_from_them():
    timing = time_fn(matmul_loop(1, 32), repeats=9, warmup=2, device=CPU, label="mm")
    assert len(timing.samples) == 9
    assert all(s > 0 for s in timing.samples)
    assert timing.median == statistics.median(timing.samples)
    q1, _, q3 = statistics.quantiles(timing.samples, n=4, method="inclusive")
    assert timing.iqr == pytest.approx(q3 - q1)
    assert timing.number >= 1
    d = timing.to_dict()
    assert (
        d["samples"] == timing.samples and d["median"] == timing.median and d["iqr"] == timing.iqr
    )
    assert d["label"] == "mm"


def test_timing_median_and_iqr_of_known_samples():
    timing = Timing([5.0, 1.0, 4.0, 2.0, 3.0])
    assert timing.median == 3.0
    assert timing.iqr == 2.0  # inclusive quartiles 2 and 4
    assert Timing([7.0]).iqr == 0.0


def test_time_fn_records_its_provenance():
    timing = time_fn(matmul_loop(1, 32), repeats=3, device=CPU)
    assert timing.env["device"] == "cpu"
    assert timing.env["torch"] == torch.__version__
    assert timing.env["device_class"] in ("cpu", "cpu-bf16")


def test_time_fn_calls_warmup_calibration_and_repeats():
    calls = []
    time_fn(lambda: calls.append(1), warmup=4, repeats=6, device=CPU, min_sample_s=0)
    assert len(calls) == 4 + 1 + 6  # warm-up, one calibration call, one call per sample


def test_time_fn_leaves_slow_warmup_calls_out_of_the_samples():
    calls = []

    def first_calls_slow():
        calls.append(1)
        if len(calls) <= 2:
            time.sleep(0.2)

    timing = time_fn(first_calls_slow, warmup=2, repeats=5, device=CPU)
    assert max(timing.samples) < 0.1


def test_time_fn_synchronises_the_device_around_every_sample(monkeypatch):
    synced = []
    monkeypatch.setattr(measure, "synchronize", lambda device: synced.append(device))
    time_fn(lambda: None, warmup=1, repeats=5, device=CPU, min_sample_s=0)
    assert len(synced) == 2 * (1 + 5)  # before and after the calibration call and each sample
    assert set(synced) == {CPU}


def test_time_fn_repeats_calls_inside_a_sample_for_fast_functions():
    timing = time_fn(lambda: None, repeats=3, device=CPU, min_sample_s=1e-3)
    assert timing.number > 10  # a no-op takes well under 0.1 ms
    assert timing.median < 1e-4  # the per-call time, not the per-sample time


@pytest.mark.parametrize(
    ("samples", "noisy"),
    [
        ([1.0] * 10, False),
        ([0.98, 0.99, 1.0, 1.01, 1.02], False),  # IQR 0.02 = 2% of the median
        ([0.8, 0.9, 1.0, 1.1, 1.2], True),  # IQR 0.2 = 20% of the median
        ([0.0, 0.0, 0.0], False),  # a zero median is not called noisy (no division by 0)
    ],
)
def test_timing_is_noisy_when_iqr_passes_ten_percent_of_median(samples, noisy):
    timing = Timing(samples)
    assert timing.noisy is noisy
    assert ("noisy" in repr(timing)) is noisy


def test_noisy_threshold_is_ten_percent():
    assert NOISY == 0.10
    assert not Timing([0.95, 0.96, 1.0, 1.04, 1.05]).noisy  # IQR/median = 0.08
    assert Timing([0.93, 0.94, 1.0, 1.06, 1.07]).noisy  # IQR/median = 0.12


# --- compare ----------------------------------------------------------------------------------


def test_compare_reads_a_function_doing_twice_the_work_as_2x():
    """Baseline: 4 matmuls, candidate: 2 of the same; the speedup must read 2.0 +- 0.2.

    Samples last about 1 ms, so they seldom straddle a pre-emption; the median of five
    comparisons (about a second in all) is what is asserted.
    """
    speedups = [
        compare(matmul_loop(4), matmul_loop(2), repeats=31, device=CPU).speedup for _ in range(5)
    ]
    speedup = statistics.median(speedups)
    print(f"\ncompare, twice the work: median speedup {speedup:.3f} of runs {speedups}")
    assert speedup == pytest.approx(2.0, abs=0.2)


def test_compare_reads_identical_functions_as_1x():
    work = matmul_loop(2)
    speedups = [compare(work, work, repeats=21, device=CPU).speedup for _ in range(3)]
    assert statistics.median(speedups) == pytest.approx(1.0, abs=0.1)


def harness_and_timer_medians(step, rounds: int, seed: int) -> tuple[float, float]:
    """Median seconds per call of `step` by compare() and by torch.utils.benchmark.Timer.

    Both time samples of the same number of calls (Timer.timeit with the harness's calibrated
    `number`), round by round in a random order, so that load changes hit both alike and no
    scheduler rhythm locks onto one of them; each side's median is over all its samples.
    """
    timer = Timer("step()", globals={"step": step}, num_threads=torch.get_num_threads())
    order = random.Random(seed)
    ours, theirs = [], []
    for _ in range(rounds):
        c = None
        for side in order.sample(["ours", "theirs"], 2):
            if side == "ours":
                c = compare(step, step, repeats=2, warmup=1, device=CPU)
                ours += c.baseline.samples + c.candidate.samples
            else:
                number = c.baseline.number if c else 1
                theirs += [timer.timeit(number=number).median for _ in range(4)]
    return statistics.median(ours), statistics.median(theirs)


def test_compare_agrees_with_torch_utils_benchmark_timer():
    """The harness and torch.utils.benchmark time the same training step within 10%.

    A loaded 2-core machine moves either median by several percent now and then, so up to
    three measurements are taken, stopping at the first within 10%: a harness that times
    wrongly (no division by the calls per sample, warm-up timed, a mean for a median) is off
    by more than that every time.
    """
    torch.manual_seed(0)
    model = MLP(dim=64, hidden=128, depth=2)
    x, y = torch.randn(64, 64), torch.randint(0, 10, (64,))

    def step():
        model.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()

    diffs = []
    for attempt in range(3):
        ours, theirs = harness_and_timer_medians(step, rounds=60, seed=attempt)
        diffs.append(ours / theirs - 1)
        print(
            f"\ncompare vs torch.utils.benchmark.Timer: {ours * 1e6:.1f} us vs "
            f"{theirs * 1e6:.1f} us per step, difference {diffs[-1]:+.1%}"
        )
        if abs(diffs[-1]) < 0.10:
            break
    assert abs(diffs[-1]) < 0.10, f"differences {[f'{d:+.1%}' for d in diffs]}"


def test_compare_interleaves_baseline_and_candidate_alternating_the_order():
    log = []
    compare(
        lambda: log.append("A"),
        lambda: log.append("B"),
        warmup=2,
        repeats=4,
        min_sample_s=0,
        device=CPU,
    )
    warmup, calibration, samples = log[:4], log[4:6], log[6:]
    assert warmup == ["A", "B", "A", "B"]
    assert calibration == ["A", "B"]
    assert samples == ["A", "B", "B", "A", "A", "B", "B", "A"]


def test_compare_ratios_pair_baseline_and_candidate_samples():
    c = compare(matmul_loop(2, 32), matmul_loop(1, 32), repeats=6, device=CPU)
    assert len(c.ratios) == len(c.baseline.samples) == len(c.candidate.samples) == 6
    assert c.ratios == [a / b for a, b in zip(c.baseline.samples, c.candidate.samples, strict=True)]
    assert c.speedup == statistics.median(c.ratios)
    assert c.baseline.env["device"] == c.candidate.env["device"] == "cpu"


def test_speedup_is_the_median_of_pair_ratios_not_the_ratio_of_medians():
    baseline = Timing([2.0, 2.0, 9.0], label="slow")
    candidate = Timing([1.0, 4.0, 3.0], label="fast")
    c = Comparison(baseline, candidate, ratios=[2.0, 0.5, 3.0])
    assert c.speedup == 2.0
    assert baseline.median / candidate.median != c.speedup  # 2 / 3
    d = c.to_dict()
    assert d["speedup"] == 2.0 and d["ratios"] == [2.0, 0.5, 3.0]
    assert "2.00x" in repr(c)


# --- throughput, FLOPs, MFU ----------------------------------------------------------------------


def test_throughput_is_batch_size_over_median_time():
    tp = Throughput(Timing([0.5, 0.25, 1.0]), batch_size=64)
    assert tp.samples_per_s == 64 / 0.5
    assert tp.to_dict()["samples_per_s"] == 128.0


def test_throughput_times_the_function():
    tp = throughput(matmul_loop(1, 32), batch_size=32, repeats=5, device=CPU)
    assert len(tp.timing.samples) == 5
    assert tp.samples_per_s == 32 / tp.timing.median


def test_flops_of_a_linear_layer_forward_is_2_b_in_out():
    batch, d_in, d_out = 8, 32, 16
    layer = nn.Linear(d_in, d_out)
    x = torch.randn(batch, d_in)
    assert flops(lambda: layer(x)) == 2 * batch * d_in * d_out


def test_flops_of_forward_and_backward_through_a_linear_layer_is_three_times_forward():
    batch, d_in, d_out = 8, 32, 16
    layer = nn.Linear(d_in, d_out)
    x = torch.randn(batch, d_in, requires_grad=True)  # input gradient too: 2 matmuls backward
    assert flops(lambda: layer(x).sum().backward()) == 3 * 2 * batch * d_in * d_out


def test_mfu_is_achieved_flops_over_peak():
    assert mfu(1e9, 0.5, 4e9) == pytest.approx(0.5)  # 2 GFLOP/s of a 4 GFLOP/s peak
    assert mfu(6e12, 2.0, 1e13) == pytest.approx(0.3)
