"""Red team, notebook 02 (batch_size): wrong and valid answers written from the notebook alone."""

from __future__ import annotations

import gc
import statistics
import time

import numpy as np
import pytest
import torch
from redteam_helpers import assert_verdict, in_ci, run_check

import course_utils as cu
from course_utils.lessons import batch_size as lesson
from course_utils.lessons import large_batch  # 02b-lr-scaling, lesson 02b since issue 34

# Since issue 34 these checks are lesson 02b's (notebook 02b_large_batch, package large_batch):
# 02-lr-scaling is 02b-lr-scaling, 02-trust-ratio 02b-trust-ratio, 02-optimizer-choice
# 02b-optimizer-choice; the cases are as the red team wrote them.

device = torch.device("cpu")  # the notebook's global, which its probe passes on

# --- 02-throughput-sweep: throughput_sweep(make_step, batch_sizes) -> {b: samples/s} --------


def _median_seconds(step, warmup=2, repeats=5):
    for _ in range(warmup):
        step()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def sweep_steps_per_s(make_step, batch_sizes):
    return {b: 1 / _median_seconds(make_step(b)) for b in batch_sizes}


def sweep_no_warmup(make_step, batch_sizes):
    return {b: b / _median_seconds(make_step(b), warmup=0, repeats=1) for b in batch_sizes}


def sweep_one_step_for_all(make_step, batch_sizes):
    step = make_step(batch_sizes[0])
    return {b: b / _median_seconds(step) for b in batch_sizes}


def sweep_counts_twice(make_step, batch_sizes):
    return {b: 2 * b / _median_seconds(make_step(b)) for b in batch_sizes}  # forward + backward


def sweep_seconds_per_sample(make_step, batch_sizes):
    return {b: _median_seconds(make_step(b)) / b for b in batch_sizes}


def sweep_builds_inside_timing(make_step, batch_sizes):
    return {
        b: cu.throughput(lambda b=b: make_step(b)(), b, repeats=5).samples_per_s
        for b in batch_sizes
    }


def sweep_mean_with_first(make_step, batch_sizes):
    results = {}
    for b in batch_sizes:
        step = make_step(b)
        start = time.perf_counter()
        for _ in range(5):
            step()
        results[b] = 5 * b / (time.perf_counter() - start)
    return results


def sweep_min_of_time_fn(make_step, batch_sizes):
    """Valid: cu.time_fn, and the fastest sample (timeit's rule) instead of the median."""
    results = {}
    for b in reversed(batch_sizes):
        timing = cu.time_fn(make_step(b), warmup=2, repeats=5)
        results[b] = b / min(timing.samples)
    return dict(sorted(results.items()))


def sweep_manual_median(make_step, batch_sizes):
    """Valid: perf_counter, three warm-up calls, a median of seven."""
    return {b: b / _median_seconds(make_step(b), warmup=3, repeats=7) for b in batch_sizes}


FIRST_CALL = r"first call|warm up"

THROUGHPUT = [
    pytest.param(
        sweep_steps_per_s,
        "failed",
        r"steps/s|steps per second|per step",
        (FIRST_CALL,),
        id="wrong-steps-per-second",
    ),
    pytest.param(
        sweep_no_warmup, "failed", r"first call|warm", (r"twice|steps/s",), id="wrong-no-warmup"
    ),
    pytest.param(
        sweep_one_step_for_all,
        "failed",
        r"one batch|same step|fresh|each",
        (FIRST_CALL,),
        id="wrong-one-step-for-all",
    ),
    pytest.param(
        sweep_counts_twice,
        "failed",
        r"2x|twice|once",
        (FIRST_CALL,),
        id="wrong-counts-samples-twice",
    ),
    pytest.param(
        sweep_seconds_per_sample,
        "failed",
        r"seconds per sample",
        (FIRST_CALL,),
        id="wrong-seconds-per-sample",
    ),
    pytest.param(
        sweep_builds_inside_timing,
        "failed",
        r"first call|build|fresh",
        (r"twice",),
        id="wrong-builds-step-inside-timing",
    ),
    pytest.param(
        sweep_mean_with_first,
        "failed",
        r"first call|warm",
        (r"twice",),
        id="wrong-mean-includes-first-call",
    ),
    pytest.param(sweep_min_of_time_fn, "passed", None, (), id="valid-min-of-time-fn"),
    pytest.param(sweep_manual_median, "passed", None, (), id="valid-manual-median"),
]
THROUGHPUT = in_ci(THROUGHPUT, {"valid-manual-median", "wrong-no-warmup", "wrong-steps-per-second"})


@pytest.mark.parametrize("fn, expected, cause, not_causes", THROUGHPUT)
def test_throughput_sweep(fn, expected, cause, not_causes):
    assert_verdict(run_check(lesson.check_throughput_sweep, fn), expected, cause, not_causes)


# --- 02-largest-batch: largest_batch(make_step, candidates) -> largest b that trains, or None


def _probe(make_step, candidates, *, fits_once, is_oom, release_in_except=False, calls=2):
    def fits(b):
        try:
            step = make_step(b)
            for _ in range(calls):
                step()
            return True
        except Exception as exc:
            if not is_oom(exc):
                raise
            if release_in_except:
                lesson.release_cached_memory(device)
        return False

    best = None
    for b in candidates:
        if not (fits_once or fits)(b):
            if not release_in_except:
                lesson.release_cached_memory(device)
            break
        best = b
    return best


def _cuda_oom_only(exc):
    return isinstance(exc, torch.cuda.OutOfMemoryError)


def _any_error(exc):
    return True


def _message_only(exc):
    return "out of memory" in str(exc).lower()


def batch_cuda_oom_only(make_step, candidates):
    return _probe(make_step, candidates, fits_once=None, is_oom=_cuda_oom_only)


def batch_catches_everything(make_step, candidates):
    return _probe(make_step, candidates, fits_once=None, is_oom=_any_error)


def batch_message_only(make_step, candidates):
    return _probe(make_step, candidates, fits_once=None, is_oom=_message_only)


def batch_build_only(make_step, candidates):
    return _probe(make_step, candidates, fits_once=None, is_oom=lesson.is_out_of_memory, calls=0)


def batch_one_call(make_step, candidates):
    return _probe(make_step, candidates, fits_once=None, is_oom=lesson.is_out_of_memory, calls=1)


def batch_keeps_last_step(make_step, candidates):
    best, step = None, None
    for b in candidates:
        try:
            step = make_step(b)  # the previous step is still referenced while this one builds
            step()
            step()
        except Exception as exc:
            if not lesson.is_out_of_memory(exc):
                raise
            lesson.release_cached_memory(device)
            break
        best = b
    return best


def batch_release_in_except(make_step, candidates):
    return _probe(
        make_step,
        candidates,
        fits_once=None,
        is_oom=lesson.is_out_of_memory,
        release_in_except=True,
    )


def batch_returns_first_failure(make_step, candidates):
    best = None
    for b in candidates:
        best = b
        try:
            step = make_step(b)
            step()
            step()
            del step
        except Exception as exc:
            if not lesson.is_out_of_memory(exc):
                raise
            break
    return best  # the first batch that did NOT fit when one fails


def batch_zero_when_none(make_step, candidates):
    best = _probe(make_step, candidates, fits_once=None, is_oom=lesson.is_out_of_memory)
    return best or 0


def _tries(make_step, b):
    try:
        step = make_step(b)
        step()
        step()
        return True
    except Exception as exc:
        if not lesson.is_out_of_memory(exc):
            raise
    return False


def _by_message(exc):
    text = str(exc)  # real CUDA: "CUDA out of memory. Tried to allocate ..."
    return "out of memory" in text or "CUBLAS_STATUS_ALLOC_FAILED" in text


def batch_by_message(make_step, candidates):
    """Valid on a real GPU: out of memory told by the words CUDA and cuBLAS use."""
    return _probe(make_step, candidates, fits_once=None, is_oom=_by_message)


def batch_binary_search(make_step, candidates):
    """Valid: bisection over the ascending candidates, freeing memory after each failure."""
    lo, hi, best = 0, len(candidates) - 1, None
    while lo <= hi:
        mid = (lo + hi) // 2
        ok = _tries(make_step, candidates[mid])
        gc.collect()
        if ok:
            best, lo = candidates[mid], mid + 1
        else:
            lesson.release_cached_memory(device)
            hi = mid - 1
    return best


def _own_oom_test(exc):
    text = str(exc)
    return isinstance(exc, torch.cuda.OutOfMemoryError) or (
        isinstance(exc, RuntimeError)
        and ("out of memory" in text or "CUBLAS_STATUS_ALLOC_FAILED" in text)
    )


def batch_from_the_top(make_step, candidates):
    """Valid: largest first, stop at the first that trains; its own out-of-memory test."""
    for b in reversed(candidates):
        try:
            step = make_step(b)
            step()
            step()
            return b
        except Exception as exc:
            if not _own_oom_test(exc):
                raise
        step = None
        gc.collect()
        lesson.release_cached_memory(device)
    return None


CAUGHT_RIGHT = (r"escape", r"hid|swallow")  # for probes whose error handling is right

LARGEST_BATCH = [
    pytest.param(
        batch_cuda_oom_only,
        "failed",
        r"cublas|RuntimeError|message|disguise",
        (r"hid|swallow",),
        id="wrong-catches-only-cuda-oom",
    ),
    pytest.param(
        batch_catches_everything,
        "failed",
        r"bug|shape|other error|let.*through",
        (r"escape",),
        id="wrong-catches-every-error",
    ),
    pytest.param(
        batch_message_only,
        "failed",
        r"cublas|ALLOC",
        (r"hid|swallow",),
        id="wrong-matches-out-of-memory-text",
    ),
    pytest.param(
        batch_build_only,
        "failed",
        r"train|step|call",
        CAUGHT_RIGHT,
        id="wrong-builds-without-training",
    ),
    pytest.param(
        batch_one_call,
        "failed",
        r"second|momentum|twice|optimizer",
        CAUGHT_RIGHT,
        id="wrong-trains-once",
    ),
    pytest.param(
        batch_keeps_last_step,
        "failed",
        r"referenc|previous|free|held",
        CAUGHT_RIGHT,
        id="wrong-keeps-previous-step",
    ),
    pytest.param(
        batch_release_in_except,
        "failed",
        r"except|traceback|free|held|referenc",
        CAUGHT_RIGHT,
        id="wrong-releases-inside-except",
    ),
    pytest.param(
        batch_returns_first_failure,
        "failed",
        r"fit|larg|one (too )?(big|large)",
        CAUGHT_RIGHT,
        id="wrong-returns-first-failure",
    ),
    pytest.param(batch_zero_when_none, "failed", r"None", CAUGHT_RIGHT, id="wrong-zero-not-none"),
    pytest.param(batch_binary_search, "passed", None, (), id="valid-binary-search"),
    pytest.param(batch_by_message, "passed", None, (), id="valid-oom-by-message-as-cuda-words-it"),
    pytest.param(batch_from_the_top, "passed", None, (), id="valid-largest-first-own-oom-test"),
]
LARGEST_BATCH = in_ci(
    LARGEST_BATCH,
    {
        "valid-oom-by-message-as-cuda-words-it",
        "wrong-catches-only-cuda-oom",
        "wrong-keeps-previous-step",
    },
)


@pytest.mark.parametrize("fn, expected, cause, not_causes", LARGEST_BATCH)
def test_largest_batch(fn, expected, cause, not_causes):
    assert_verdict(run_check(lesson.check_largest_batch, fn), expected, cause, not_causes)


# --- 02-lr-scaling: linear_scaling_schedule(optimizer, batch_size, warmup_steps, base_batch) -


def _lambda(optimizer, factor):
    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def sched_floor_division(optimizer, batch_size, warmup_steps, base_batch=256):
    k = batch_size // base_batch
    return _lambda(optimizer, lambda t: 1 + (k - 1) * min(t, warmup_steps) / warmup_steps)


def sched_no_warmup(optimizer, batch_size, warmup_steps, base_batch=256):
    k = batch_size / base_batch
    return _lambda(optimizer, lambda t: k)


def sched_warmup_from_zero(optimizer, batch_size, warmup_steps, base_batch=256):
    k = batch_size / base_batch
    return _lambda(optimizer, lambda t: k * min(t, warmup_steps) / warmup_steps)


def sched_one_step_late(optimizer, batch_size, warmup_steps, base_batch=256):
    k = batch_size / base_batch
    return _lambda(optimizer, lambda t: 1 + (k - 1) * min(t + 1, warmup_steps) / warmup_steps)


def sched_one_step_early(optimizer, batch_size, warmup_steps, base_batch=256):
    k, w = batch_size / base_batch, max(warmup_steps - 1, 1)
    return _lambda(optimizer, lambda t: 1 + (k - 1) * min(t, w) / w)


def sched_square_root(optimizer, batch_size, warmup_steps, base_batch=256):
    k = (batch_size / base_batch) ** 0.5
    return _lambda(optimizer, lambda t: 1 + (k - 1) * min(t, warmup_steps) / warmup_steps)


def sched_then_cosine(optimizer, batch_size, warmup_steps, base_batch=256):
    import math

    k = batch_size / base_batch

    def factor(t):
        if t < warmup_steps:
            return 1 + (k - 1) * t / warmup_steps
        return k * 0.5 * (1 + math.cos(math.pi * min(t - warmup_steps, 1000) / 1000))

    return _lambda(optimizer, factor)


def sched_linear_lr(optimizer, batch_size, warmup_steps, base_batch=256):
    """Valid: the LR pre-scaled to its target, LinearLR from 1/k up to it (k >= 1)."""
    k = batch_size / base_batch
    if k < 1:
        return _lambda(optimizer, lambda t: 1 + (k - 1) * min(t, warmup_steps) / warmup_steps)
    for group in optimizer.param_groups:
        group["lr"] = group["lr"] * k
    return torch.optim.lr_scheduler.LinearLR(
        optimizer, start_factor=1 / k, end_factor=1.0, total_iters=warmup_steps
    )


def sched_interp(optimizer, batch_size, warmup_steps, base_batch=256):
    """Valid: np.interp between (0, 1) and (warmup_steps, k), flat beyond."""
    k = batch_size / base_batch
    return _lambda(optimizer, lambda t: float(np.interp(t, [0, warmup_steps], [1.0, k])))


# Exercise 4 is now "diagnose and fix the colleague's schedule" (lesson.colleague_schedule:
# k floored, the ramp from zero, the peak one step early): the colleague's code as given, and
# the partial fixes a learner who reads the trace for one fault only would hand in.


def sched_colleague_as_given(optimizer, batch_size, warmup_steps, base_batch=256):
    return large_batch.colleague_schedule(optimizer, batch_size, warmup_steps, base_batch)


def sched_colleague_true_division_only(optimizer, batch_size, warmup_steps, base_batch=256):
    k = batch_size / base_batch  # fixed the floor; the ramp still starts near zero
    return _lambda(optimizer, lambda t: k * min(t + 1, warmup_steps) / warmup_steps)


def sched_colleague_ramp_from_base_only(optimizer, batch_size, warmup_steps, base_batch=256):
    k = batch_size // base_batch  # fixed the start; k still floored, peak still a step early
    return _lambda(optimizer, lambda t: 1 + (k - 1) * min(t + 1, warmup_steps) / warmup_steps)


def sched_colleague_two_of_three(optimizer, batch_size, warmup_steps, base_batch=256):
    k = batch_size / base_batch  # the step + 1 is left in
    return _lambda(optimizer, lambda t: 1 + (k - 1) * min(t + 1, warmup_steps) / warmup_steps)


def sched_colleague_all_fixed_max_form(optimizer, batch_size, warmup_steps, base_batch=256):
    """Valid: the colleague's shape kept, written as a blend of 1 and k."""
    k = batch_size / base_batch
    return _lambda(optimizer, lambda t: max(1.0, min(k, 1 + (k - 1) * t / warmup_steps)))


NO_WARMUP = r"no warm|without (a )?warm|warm-up (is )?missing"  # specimens say "5 warm-up steps"

LR_SCALING = [
    pytest.param(
        sched_floor_division,
        "failed",
        r"whole|integer|//|divi",
        (NO_WARMUP,),
        id="wrong-floor-division",
    ),
    pytest.param(sched_no_warmup, "failed", r"warm", (r"whole|integer",), id="wrong-no-warmup"),
    pytest.param(
        sched_warmup_from_zero,
        "failed",
        r"step 0|base LR|start|zero",
        (r"integer",),
        id="wrong-warmup-from-zero",
    ),
    pytest.param(
        sched_one_step_late,
        "failed",
        r"step 0|off by one|one step|start",
        (),
        id="wrong-one-step-ahead",
    ),
    pytest.param(
        sched_one_step_early,
        "failed",
        r"step|off by one|warmup_steps",
        (),
        id="wrong-reaches-k-a-step-early",
    ),
    pytest.param(
        sched_square_root,
        "failed",
        r"linear|sqrt|square|k\b",
        (NO_WARMUP,),
        id="wrong-square-root-scaling",
    ),
    pytest.param(
        sched_then_cosine,
        "failed",
        r"after|constant|decay|flat",
        (),
        id="wrong-decays-after-warmup",
    ),
    pytest.param(
        sched_colleague_as_given,
        "failed",
        r"integer|whole|//",
        (NO_WARMUP, r"sqrt"),
        id="wrong-colleague-as-given",
    ),
    pytest.param(
        sched_colleague_true_division_only,
        "failed",
        r"base LR|start|zero",
        (r"integer", NO_WARMUP),
        id="wrong-colleague-floor-fixed-only",
    ),
    pytest.param(
        sched_colleague_ramp_from_base_only,
        "failed",
        r"integer|whole|//",
        (NO_WARMUP, r"below the base"),
        id="wrong-colleague-start-fixed-only",
    ),
    pytest.param(
        sched_colleague_two_of_three,
        "failed",
        r"exactly at step|one step|off by one",
        (r"integer", NO_WARMUP, r"below the base"),
        id="wrong-colleague-peak-a-step-early-left",
    ),
    pytest.param(
        sched_colleague_all_fixed_max_form, "passed", None, (), id="valid-colleague-fixed"
    ),
    pytest.param(sched_linear_lr, "passed", None, (), id="valid-prescaled-linear-lr"),
    pytest.param(sched_interp, "passed", None, (), id="valid-np-interp"),
]


@pytest.mark.parametrize("fn, expected, cause, not_causes", LR_SCALING)
def test_lr_scaling(fn, expected, cause, not_causes):
    assert_verdict(run_check(large_batch.check_lr_schedule, fn), expected, cause, not_causes)


# --- 02-noise-scale: noise_scale(gradient, b_small, b_big, n) -> B_simple ------------------


def _mean_sq(gradient, b, n):
    return torch.stack([gradient(b).pow(2).sum() for _ in range(n)]).mean()


def noise_big_as_true(gradient, b_small, b_big, n):
    small, big = _mean_sq(gradient, b_small, n), _mean_sq(gradient, b_big, n)
    trace = (small - big) / (1 / b_small - 1 / b_big)
    return float(trace / big)  # |G_big|^2 taken as |G|^2


def noise_ratio_per_draw(gradient, b_small, b_big, n):
    estimates = []
    for _ in range(n):
        small, big = gradient(b_small).pow(2).sum(), gradient(b_big).pow(2).sum()
        g2 = (b_big * big - b_small * small) / (b_big - b_small)
        trace = (small - big) / (1 / b_small - 1 / b_big)
        estimates.append(float(trace / g2))
    return float(np.mean(estimates))


def noise_no_batch_factors(gradient, b_small, b_big, n):
    small, big = _mean_sq(gradient, b_small, n), _mean_sq(gradient, b_big, n)
    return float((small - big) / big)


def noise_norms_not_squared(gradient, b_small, b_big, n):
    small = torch.stack([gradient(b_small).norm() for _ in range(n)]).mean()
    big = torch.stack([gradient(b_big).norm() for _ in range(n)]).mean()
    g2 = (b_big * big - b_small * small) / (b_big - b_small)
    trace = (small - big) / (1 / b_small - 1 / b_big)
    return float(trace / g2)


def noise_mean_gradient_first(gradient, b_small, b_big, n):
    small = torch.stack([gradient(b_small) for _ in range(n)]).mean(0).pow(2).sum()
    big = torch.stack([gradient(b_big) for _ in range(n)]).mean(0).pow(2).sum()
    g2 = (b_big * big - b_small * small) / (b_big - b_small)
    trace = (small - big) / (1 / b_small - 1 / b_big)
    return float(trace / g2)


def noise_both_shortcuts(gradient, b_small, b_big, n):
    small, big = _mean_sq(gradient, b_small, n), _mean_sq(gradient, b_big, n)
    return float(b_small * small / big)  # small batches "all noise", big batches "all signal"


def noise_linear_solve(gradient, b_small, b_big, n):
    """Valid: E|G_B|^2 = |G|^2 + S/B at two B, solved as a 2x2 system in float64."""
    small = _mean_sq(gradient, b_small, n).double()
    big = _mean_sq(gradient, b_big, n).double()
    a = torch.tensor([[1.0, 1 / b_small], [1.0, 1 / b_big]], dtype=torch.float64)
    g2, trace = torch.linalg.solve(a, torch.stack([small, big]))
    return float(trace / g2)


def noise_unbiased_moments(gradient, b_small, b_big, n):
    """Valid: tr(Sigma) from the draws' variance at both sizes, |G|^2 from the big batches'
    mean with its own noise subtracted: every term unbiased, then one ratio."""
    small = torch.stack([gradient(b_small) for _ in range(n)]).double()
    big = torch.stack([gradient(b_big) for _ in range(n)]).double()
    trace = (b_small * small.var(0).sum() + b_big * big.var(0).sum()) / 2
    mean = torch.cat([small, big]).mean(0)  # E = G, noise tr/(n b_s) + tr/(n b_b), over 4
    noise = trace * (1 / b_small + 1 / b_big) / (4 * n)
    return float(trace / (mean.pow(2).sum() - noise))


NOISE_SCALE = [
    pytest.param(
        noise_big_as_true,
        "failed",
        r"\|G_big\|\^2|big batch|overestimat|biased",
        (),
        id="wrong-big-batch-norm-as-true",
    ),
    pytest.param(noise_ratio_per_draw, "failed", None, (r"squar",), id="wrong-ratio-per-draw"),
    pytest.param(noise_no_batch_factors, "failed", None, (), id="wrong-no-batch-factors"),
    pytest.param(noise_norms_not_squared, "failed", None, (), id="wrong-norms-not-squared"),
    pytest.param(
        noise_mean_gradient_first, "failed", None, (), id="wrong-averages-gradients-first"
    ),
    pytest.param(
        noise_both_shortcuts,
        "failed",
        r"\|G_big\|\^2|shortcut|noise",
        (),
        id="wrong-both-shortcuts",
    ),
    pytest.param(noise_linear_solve, "passed", None, (), id="valid-linear-solve"),
    pytest.param(noise_unbiased_moments, "passed", None, (), id="valid-unbiased-moments"),
]
NOISE_SCALE = in_ci(NOISE_SCALE, {"valid-linear-solve", "wrong-big-batch-norm-as-true"})


@pytest.mark.parametrize("fn, expected, cause, not_causes", NOISE_SCALE)
def test_noise_scale(fn, expected, cause, not_causes):
    assert_verdict(run_check(lesson.check_noise_scale, fn), expected, cause, not_causes)
