"""Lesson 02 (batch size): each check passes correct solutions, valid alternatives included,
fails the half-understood ones with a message naming the cause, and reports not-attempted for
the untouched stub. The CUDA probe runs against a faked torch.cuda."""

from __future__ import annotations

import importlib
import math
import os
from pathlib import Path

import pytest
import torch
from check_helpers import fails, failure, not_attempted, status_of
from judge_helpers import remote_verdict

import course_utils as cu
from course_utils import mode
from course_utils.lessons import batch_size as lesson
from course_utils.lessons.batch_size import lr_check


@pytest.fixture(autouse=True)
def quick():
    mode.set_quick(True)
    yield
    mode.set_quick(None)


# --- exercise 1: throughput sweep ------------------------------------------------------------


def sweep(make_step, batch_sizes):
    return {b: cu.throughput(make_step(b), b, repeats=10).samples_per_s for b in batch_sizes}


def sweep_by_hand(make_step, batch_sizes):
    """A valid alternative: own timer, warm-up, median, Throughput objects not needed."""
    import statistics
    import time

    out = {}
    for b in batch_sizes:
        step = make_step(b)
        for _ in range(2):
            step()
        samples = []
        for _ in range(7):
            t0 = time.perf_counter()
            step()
            cu.synchronize()
            samples.append(time.perf_counter() - t0)
        out[b] = b / statistics.median(samples)
    return out


def sweep_twice_the_samples(make_step, batch_sizes):
    return {b: cu.throughput(make_step(b), 2 * b, repeats=10).samples_per_s for b in batch_sizes}


def sweep_steps_per_second(make_step, batch_sizes):
    return {b: 1 / cu.time_fn(make_step(b), repeats=10).median for b in batch_sizes}


def sweep_one_step_for_all(make_step, batch_sizes):
    step = make_step(batch_sizes[0])
    return {b: cu.throughput(step, b, repeats=10).samples_per_s for b in batch_sizes}


def sweep_cold_mean(make_step, batch_sizes):
    import time

    out = {}
    for b in batch_sizes:
        step, t0 = make_step(b), time.perf_counter()
        for _ in range(5):
            step()
        out[b] = 5 * b / (time.perf_counter() - t0)
    return out


@pytest.mark.parametrize("answer", [sweep, sweep_by_hand])
def test_throughput_sweep_passes_the_harness_and_a_hand_written_timer(answer):
    assert status_of(lesson.check_throughput_sweep, answer) == "passed"


@pytest.mark.parametrize(
    "wrong, cause",
    [
        (sweep_twice_the_samples, "off by 2x"),
        (sweep_steps_per_second, "steps/s"),
        (sweep_one_step_for_all, "make_step(b) for each b"),
        (sweep_cold_mean, "warm up"),
    ],
)
def test_throughput_sweep_fails_miscounts_steps_per_second_one_step_and_cold_timing(wrong, cause):
    exc = failure(lesson.check_throughput_sweep, wrong)
    assert exc.status == "failed" and cause in exc.summary


def test_throughput_sweep_reports_missing_batch_sizes_as_an_error():
    assert status_of(lesson.check_throughput_sweep, lambda m, sizes: {sizes[0]: 1.0}) == "error"


def test_throughput_sweep_not_attempted_and_reference_refused():
    assert fails(lesson.check_throughput_sweep, not_attempted) == "not-attempted"
    exc = failure(lesson.check_throughput_sweep, lambda m, s: lesson.reference_sweep(m, s))
    assert exc.status == "failed"


# --- exercise 2: the largest batch that fits -----------------------------------------------------


def _try(make_step, b):
    try:
        step = make_step(b)
        step()
        step()
        return True
    except Exception as exc:
        if not lesson.is_out_of_memory(exc):
            raise
    return False


def probe(make_step, candidates):
    best = None
    for b in candidates:
        if not _try(make_step, b):
            break
        best = b
    return best


def probe_binary_search(make_step, candidates):
    lo, hi, best = 0, len(candidates) - 1, None
    while lo <= hi:
        mid = (lo + hi) // 2
        if _try(make_step, candidates[mid]):
            best, lo = candidates[mid], mid + 1
        else:
            hi = mid - 1
    return best


def probe_descending(make_step, candidates):
    for b in reversed(candidates):
        if _try(make_step, b):
            return b
    return None


def probe_one_step(make_step, candidates):
    best = None
    for b in candidates:
        try:
            step = None
            step = make_step(b)
            step()
        except Exception as exc:
            if not lesson.is_out_of_memory(exc):
                raise
            break
        finally:
            del step
        best = b
    return best


def probe_only_oom_type(make_step, candidates):
    best = None
    for b in candidates:
        try:
            step = None
            step = make_step(b)
            step()
            step()
        except torch.cuda.OutOfMemoryError:
            break
        finally:
            del step
        best = b
    return best


def probe_catch_everything(make_step, candidates):
    best = None
    for b in candidates:
        try:
            step = None
            step = make_step(b)
            step()
            step()
        except Exception:
            break
        finally:
            del step
        best = b
    return best


def probe_keeps_the_previous_try(make_step, candidates):
    best, step = None, None
    for b in candidates:
        try:
            step = make_step(b)  # the previous step is still referenced while this one is built
            step()
            step()
        except Exception as exc:
            if not lesson.is_out_of_memory(exc):
                raise
            break
        best = b
    return best


def probe_first_failure(make_step, candidates):
    for b in candidates:
        if not _try(make_step, b):
            return b
    return candidates[-1]


@pytest.mark.parametrize("answer", [probe, probe_binary_search, probe_descending])
def test_largest_batch_passes_ascending_binary_and_descending_probes(answer):
    assert status_of(lesson.check_largest_batch, answer) == "passed"


@pytest.mark.parametrize(
    "wrong, cause",
    [
        (probe_one_step, "run two steps"),
        (probe_only_oom_type, "CUBLAS_STATUS_ALLOC_FAILED"),
        (probe_catch_everything, "not about memory"),
        (probe_keeps_the_previous_try, "previous try"),
        (probe_first_failure, "first batch that does not fit"),
    ],
)
def test_largest_batch_fails_one_step_type_only_catch_all_kept_references_and_off_by_one(
    wrong, cause
):
    exc = failure(lesson.check_largest_batch, wrong)
    assert exc.status == "failed" and cause in exc.summary


def test_largest_batch_not_attempted_and_reference_refused():
    assert fails(lesson.check_largest_batch, not_attempted) == "not-attempted"
    refused = failure(lesson.check_largest_batch, lambda m, c: lesson.reference_largest_batch(m, c))
    assert refused.status == "failed"


def test_is_out_of_memory_knows_cuda_cublas_and_cudnn_messages_and_nothing_else():
    assert lesson.is_out_of_memory(torch.cuda.OutOfMemoryError("CUDA out of memory."))
    assert lesson.is_out_of_memory(RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when ..."))
    assert lesson.is_out_of_memory(
        RuntimeError("cuDNN error: CUDNN_STATUS_NOT_SUPPORTED ... not enough memory")
    )
    assert not lesson.is_out_of_memory(RuntimeError("mat1 and mat2 shapes cannot be multiplied"))
    assert not lesson.is_out_of_memory(RuntimeError("cuDNN error: CUDNN_STATUS_NOT_SUPPORTED"))
    assert not lesson.is_out_of_memory(ValueError("out of memory"))


def test_budgeted_steps_run_out_of_memory_above_the_budget_on_any_device():
    make = lesson.budgeted(lambda b: lesson.make_step(b, kind="mlp"), 16 * lesson.MiB)
    assert probe(make, [16, 64, 256, 1024, 4096]) in (256, 1024)


@pytest.fixture
def fake_cuda(monkeypatch):
    """torch.cuda faked on a CPU machine: which device each call names, and 1000 bytes a sample."""
    calls, peak = [], {"bytes": 0}

    def record(name, value=None):
        def fn(device=None, *a, **k):
            calls.append((name, str(device)))
            return value() if callable(value) else value

        return fn

    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", record("reset"))
    monkeypatch.setattr(torch.cuda, "memory_allocated", record("allocated", 0))
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", record("peak", lambda: peak["bytes"]))
    monkeypatch.setattr(torch.cuda, "synchronize", record("sync"))
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: calls.append(("empty_cache", "")))
    monkeypatch.setattr(torch.cuda, "device", lambda d: __import__("contextlib").nullcontext())
    return calls, peak


def _fake_steps(peak, fail_from, error):
    def make_step(b):
        def step():
            if b >= fail_from:
                raise error
            peak["bytes"] = 1000 * b

        return step

    return make_step


@pytest.mark.parametrize(
    "error",
    [
        torch.cuda.OutOfMemoryError("CUDA out of memory (faked)"),
        RuntimeError("CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"),
    ],
)
def test_cuda_probe_stops_at_allocation_failures_on_the_course_device(fake_cuda, error):
    calls, peak = fake_cuda
    best, peaks = lesson.largest_batch_cuda(
        _fake_steps(peak, 64, error), [8, 16, 32, 64, 128], "cuda:1"
    )
    assert (best, peaks) == (32, {8: 8000, 16: 16000, 32: 32000})
    assert {d for name, d in calls if name in ("reset", "peak", "allocated")} == {"cuda:1"}
    assert calls[-1][0] == "empty_cache"  # released after the failure


def test_cuda_probe_stops_at_the_budget_and_re_raises_other_errors(fake_cuda):
    calls, peak = fake_cuda
    ok = _fake_steps(peak, 10**9, None)
    assert lesson.largest_batch_cuda(ok, [8, 16, 32], "cuda:0", budget_bytes=20000)[0] == 16
    bug = _fake_steps(peak, 16, RuntimeError("mat1 and mat2 shapes cannot be multiplied"))
    with pytest.raises(RuntimeError, match="shapes"):
        lesson.largest_batch_cuda(bug, [8, 16, 32], "cuda:0")


# --- exercise 3: linear scaling with warm-up --------------------------------------------------------


def _lambda_schedule(factor):
    def make(optimizer, batch_size, warmup_steps, base_batch=256):
        return torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda t: factor(t, batch_size, base_batch, warmup_steps)
        )

    return make


schedule = _lambda_schedule(lambda t, b, base, w: 1 + (b / base - 1) * min(t, w) / w)
schedule_integer_division = _lambda_schedule(
    lambda t, b, base, w: 1 + (b // base - 1) * min(t, w) / w
)
schedule_sqrt = _lambda_schedule(
    lambda t, b, base, w: 1 + (math.sqrt(b / base) - 1) * min(t, w) / w
)
schedule_no_warmup = _lambda_schedule(lambda t, b, base, w: b / base)
schedule_from_zero = _lambda_schedule(lambda t, b, base, w: b / base * min(t, w) / w)
schedule_one_step_early = _lambda_schedule(
    lambda t, b, base, w: 1 + (b / base - 1) * min(t + 1, w) / w
)


def schedule_linear_lr(optimizer, batch_size, warmup_steps, base_batch=256):
    """A valid alternative: set the peak LR, and warm up to it with LinearLR."""
    k = batch_size / base_batch
    for group in optimizer.param_groups:
        group["lr"] *= k
    return torch.optim.lr_scheduler.LinearLR(optimizer, 1 / k, 1.0, total_iters=warmup_steps)


@pytest.mark.parametrize("answer", [schedule, schedule_linear_lr])
def test_lr_scaling_passes_lambda_lr_and_linear_lr_warm_ups(answer):
    assert status_of(lesson.check_lr_schedule, answer) == "passed"


@pytest.mark.parametrize(
    "wrong, cause",
    [
        (schedule_integer_division, "integer division"),
        (schedule_sqrt, "sqrt"),
        (schedule_no_warmup, "no warm-up"),
        (schedule_from_zero, "below the base LR"),
        (schedule_one_step_early, "one step early"),
    ],
)
def test_lr_scaling_fails_integer_division_sqrt_no_warmup_zero_start_and_off_by_one(wrong, cause):
    exc = failure(lesson.check_lr_schedule, wrong)
    assert exc.status == "failed" and cause in exc.summary


def _colleague_fixed(floor=False, from_zero=False, early=False):
    """The colleague's schedule (lesson.colleague_schedule) with the faults not fixed left in."""

    def make(optimizer, batch_size, warmup_steps, base_batch=256):
        k = batch_size // base_batch if floor else batch_size / base_batch

        def factor(step):
            t = min(step + 1 if early else step, warmup_steps) / warmup_steps
            return k * t if from_zero else 1 + (k - 1) * t

        return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)

    return make


def test_lr_scaling_names_the_faults_of_the_colleagues_schedule_as_given():
    """Exercise 4 starts from lesson.colleague_schedule: its floored k shows on the batches
    that are not a whole number of base batches, its ramp from zero on the other one."""
    exc = failure(lesson.check_lr_schedule, lesson.colleague_schedule)
    assert exc.status == "failed"
    assert "integer division" in exc.summary and "below the base LR" in exc.summary


@pytest.mark.parametrize(
    "left, cause",
    [
        (dict(floor=True), "integer division"),
        (dict(from_zero=True), "below the base LR"),
        (dict(early=True), "one step early"),
        (dict(from_zero=True, early=True), "below the base LR"),
    ],
)
def test_lr_scaling_names_each_fault_a_partial_fix_of_the_colleague_leaves(left, cause):
    exc = failure(lesson.check_lr_schedule, _colleague_fixed(**left))
    assert exc.status == "failed" and cause in exc.summary


def test_lr_scaling_passes_the_colleagues_schedule_with_its_three_faults_fixed():
    assert status_of(lesson.check_lr_schedule, _colleague_fixed()) == "passed"


def schedule_first_group_only(optimizer, batch_size, warmup_steps, base_batch=256):
    k = batch_size / base_batch
    optimizer.param_groups[0]["lr"] *= k
    return torch.optim.lr_scheduler.LinearLR(optimizer, 1 / k, 1.0, total_iters=warmup_steps)


class _FirstGroupsLR(torch.optim.lr_scheduler.LRScheduler):
    """Every group gets the first group's scheduled LR."""

    def __init__(self, optimizer, k, warmup_steps):
        self.k, self.w = k, warmup_steps
        super().__init__(optimizer)

    def get_lr(self):
        f = 1 + (self.k - 1) * min(self.last_epoch, self.w) / self.w
        return [self.base_lrs[0] * f for _ in self.base_lrs]


def schedule_unscaled_linear_lr(optimizer, batch_size, warmup_steps, base_batch=256):
    k = batch_size / base_batch  # the LR never multiplied by k: the peak is the base LR
    return torch.optim.lr_scheduler.LinearLR(optimizer, 1 / k, 1.0, total_iters=warmup_steps)


@pytest.mark.parametrize(
    "wrong, cause, not_cause",
    [
        (schedule_first_group_only, "only param group 0 follows both rules", "integer"),
        (
            lambda o, b, w, base=256: _FirstGroupsLR(o, b / base, w),
            "param group 1 gets param group 0's LR",
            "integer",
        ),
        (schedule_unscaled_linear_lr, "not scaled by k", "integer division"),
        (
            _lambda_schedule(lambda t, b, base, w: 1 + (b / base - 1) * min(max(t - 1, 0), w) / w),
            "one step late",
            "early",
        ),
        (
            _lambda_schedule(lambda t, b, base, w: 1 + (b / 256 - 1) * min(t, w) / w),
            "not from the base_batch argument (160 / 256 = 0.625",
            "after the warm-up",  # its first wrong step is inside the warm-up
        ),
        (
            _lambda_schedule(lambda t, b, base, w: (b / base) ** (min(t, w) / w)),
            "geometrically",
            "integer",
        ),
        (
            _lambda_schedule(lambda t, b, base, w: 1 + (b // base - 1) * min(max(t - 1, 0), w) / w),
            "integer division (384 // 256 = 1",
            "early",
        ),
    ],
)
def test_lr_scaling_names_a_fault_only_when_it_reproduces_every_lr_of_every_group(
    wrong, cause, not_cause
):
    exc = failure(lesson.check_lr_schedule, wrong)
    assert exc.status == "failed" and cause in exc.summary, exc.summary
    assert not_cause not in exc.summary, exc.summary


def test_lr_scaling_says_what_it_measured_when_no_fault_reproduces_the_lrs():
    def decays(t, b, base, w):
        k = b / base
        return 1 + (k - 1) * t / w if t < w else k * 0.999 ** (t - w)

    exc = failure(lesson.check_lr_schedule, _lambda_schedule(decays))
    assert "no known fault" in exc.summary and "after the warm-up (steps 5-304)" in exc.summary
    assert "step 6 (after the warm-up)" in exc.summary


def test_lr_scaling_tells_every_variant_of_the_rules_apart_on_its_cases():
    """Each variant's LRs are named as that variant, or as one with fewer faults that gives
    the very same LRs (an unscaled peak with any ramp is a flat base LR): never as another
    variant with as many faults."""
    for v in lr_check.VARIANTS:
        traces = [
            [[lr * f for f in lr_check._factors(v, c)] for lr in case[0]]
            for c, case in enumerate(lr_check.LR_CASES)
        ]
        found = lr_check.variant_of(traces, 0)
        assert found is not None and (found == v or found.faults < v.faults), (v, found)


def test_lr_per_step_gives_one_list_per_param_group_for_a_sequence_of_lrs():
    one = lesson.lr_per_step(lesson.reference_lr_schedule, 0.1, 384, 4, 6)
    two = lesson.lr_per_step(lesson.reference_lr_schedule, (0.1, 0.02), 384, 4, 6)
    assert one == pytest.approx(two[0]) and [x / 5 for x in one] == pytest.approx(two[1])


def test_lr_scaling_reports_a_list_instead_of_a_scheduler_as_an_error():
    assert status_of(lesson.check_lr_schedule, lambda *a, **k: [0.1] * 10) == "error"


def test_lr_scaling_not_attempted_and_reference_refused():
    assert fails(lesson.check_lr_schedule, not_attempted) == "not-attempted"
    assert fails(lesson.check_lr_schedule, lambda *a: lesson.reference_lr_schedule(*a)) == "failed"


# --- exercise 4: gradient noise scale ---------------------------------------------------------------


def _mean_sq(gradient, b, n):
    return torch.stack([gradient(b).pow(2).sum() for _ in range(n)]).mean()


def noise_scale(gradient, b_small, b_big, n):
    small, big = _mean_sq(gradient, b_small, n), _mean_sq(gradient, b_big, n)
    g2 = (b_big * big - b_small * small) / (b_big - b_small)
    return float((small - big) / (1 / b_small - 1 / b_big) / g2)


def noise_scale_by_variance(gradient, b_small, b_big, n):
    """A valid alternative: tr(Sigma) from the spread of small-batch gradients."""
    small = torch.stack([gradient(b_small) for _ in range(n)])
    big = torch.stack([gradient(b_big) for _ in range(n)])
    g2 = big.mean(0).pow(2).sum() - big.var(0).sum() / n
    return float(b_small * small.var(0).sum() / g2)


def noise_scale_big_batch_as_true(gradient, b_small, b_big, n):
    small, big = _mean_sq(gradient, b_small, n), _mean_sq(gradient, b_big, n)
    return float((small - big) / (1 / b_small - 1 / b_big) / big)


def noise_scale_small_batch_as_trace(gradient, b_small, b_big, n):
    small, big = _mean_sq(gradient, b_small, n), _mean_sq(gradient, b_big, n)
    g2 = (b_big * big - b_small * small) / (b_big - b_small)
    return float(b_small * small / g2)


def noise_scale_swapped(gradient, b_small, b_big, n):
    small, big = _mean_sq(gradient, b_small, n), _mean_sq(gradient, b_big, n)
    g2 = (b_big * small - b_small * big) / (b_big - b_small)
    return float((big - small) / (1 / b_small - 1 / b_big) / g2)


@pytest.mark.parametrize("answer", [noise_scale, noise_scale_by_variance])
def test_noise_scale_passes_two_batch_sizes_and_the_variance_estimator(answer):
    assert status_of(lesson.check_noise_scale, answer) == "passed"


@pytest.mark.parametrize(
    "wrong, cause",
    [
        (noise_scale_big_batch_as_true, "|G_big|^2 used as |G|^2"),
        (noise_scale_small_batch_as_trace, "used as tr(Sigma)"),
        (noise_scale_swapped, "other batch size"),
    ],
)
def test_noise_scale_fails_biased_and_swapped_estimators_naming_the_bias(wrong, cause):
    exc = failure(lesson.check_noise_scale, wrong)
    assert exc.status == "failed" and cause in exc.summary


def test_noise_scale_not_attempted_and_reference_refused():
    assert fails(lesson.check_noise_scale, not_attempted) == "not-attempted"
    assert fails(lesson.check_noise_scale, lambda *a: lesson.reference_noise_scale(*a)) == "failed"


# --- the demos' helpers ----------------------------------------------------------------------


def test_noisy_regression_moments_match_monte_carlo():
    problem = lesson.NoisyRegression(
        dim=8, noise_var=0.5, scales=torch.linspace(0.5, 2.0, 8), seed=5
    )
    grads = torch.stack([problem.gradient(1) for _ in range(4000)])
    assert grads.mean(0).pow(2).sum().item() == pytest.approx(problem.grad_sq_norm, rel=0.15)
    assert grads.var(0).sum().item() == pytest.approx(problem.trace_sigma, rel=0.1)


def test_knee_is_the_smallest_batch_near_the_best_throughput():
    assert lesson.knee({4: 10.0, 16: 70.0, 64: 90.0, 256: 100.0}, within=0.2) == 64


def test_fit_critical_batch_recovers_known_parameters():
    runs = {b: (20 * (1 + 50 / b), 0.1) for b in (1, 4, 16, 64, 256, 1024)}
    s_min, b_crit = lesson.fit_critical_batch(runs)
    assert s_min == pytest.approx(20, rel=1e-6) and b_crit == pytest.approx(50, rel=1e-6)


def test_linear_scaling_saves_steps_below_the_critical_batch_and_diverges_far_above():
    runs = lesson.time_to_target({4: 1.0, 16: 1.0, 256: 1.0}, base_batch=4, base_lr=0.1)
    same, scaled = runs["same LR"], runs["linear scaling + warm-up"]
    assert scaled[16][0] < same[16][0] / 2  # 4x the batch, 4x the LR: far fewer steps
    assert math.isinf(scaled[256][0])  # 64x the LR is past the stable step size


# --- judged as `course grade` judges: the learner's side in another process --------------------

REFERENCE = "course_utils.lessons.batch_size.reference"
RED_TEAM = Path(__file__).resolve().parent / "redteam"


@pytest.fixture
def red_team(monkeypatch):
    """The red team's modules, importable here and in remote_verdict's child process (which
    imports each answer by "module:qualname")."""
    monkeypatch.syspath_prepend(str(RED_TEAM))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(RED_TEAM), str(RED_TEAM.parent)]))
    return importlib.import_module("test_02_batch_size")


@pytest.mark.parametrize(
    "check_id, answer",
    [
        ("02-throughput-sweep", "reference_sweep"),
        ("02-largest-batch", "reference_largest_batch"),
        ("02-noise-scale", "reference_noise_scale"),
        ("02-lr-scaling", "reference_lr_schedule"),
    ],
    ids=["02-throughput-sweep", "02-largest-batch", "02-noise-scale", "02-lr-scaling"],
)
def test_judged_remotely_the_reference_passes(check_id, answer):
    """Every call to the learner's code goes through a probe, and the probes' data is enough
    for the body to decide: with the learner's side in another process, the reference passes
    (on specimens the judge draws afresh)."""
    verdict = remote_verdict(check_id, f"{REFERENCE}:{answer}")
    assert verdict["status"] == "passed", verdict["message"]


@pytest.mark.parametrize(
    "check, check_id, answer",
    [
        (lesson.check_throughput_sweep, "02-throughput-sweep", "sweep_steps_per_s"),
        (lesson.check_largest_batch, "02-largest-batch", "batch_keeps_last_step"),
        (lesson.check_noise_scale, "02-noise-scale", "noise_big_as_true"),
        (lesson.check_lr_schedule, "02-lr-scaling", "sched_floor_division"),
    ],
    ids=["steps-per-second", "keeps-previous-step", "big-batch-norm-as-true", "floor-division"],
)
def test_judged_remotely_a_wrong_answer_fails_as_in_a_notebook(red_team, check, check_id, answer):
    """A red-team wrong answer gets the same verdict from the judge as in a notebook (the
    previous step kept: the simulated device's reading crosses with the probe's result)."""
    here = status_of(check, getattr(red_team, answer))
    there = remote_verdict(check_id, f"test_02_batch_size:{answer}")
    assert here == there["status"] == "failed", there["message"]
