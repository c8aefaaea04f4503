"""Lesson 02 (batch size): each check passes a correct solution, fails the usual mistakes, and
reports not-attempted for the untouched stub. Quick mode keeps the whole file under a minute."""

from __future__ import annotations

import math

import pytest
import torch
from check_helpers import fails, not_attempted, status_of

import course_utils as cu
from course_utils import mode
from course_utils.lessons import batch_size as lesson


@pytest.fixture(autouse=True)
def quick(monkeypatch):
    monkeypatch.setenv("COURSE_DATASET", "offline")
    mode.set_quick(True)
    yield
    mode.set_quick(None)


# --- solutions, right and wrong ------------------------------------------------------------


def sweep(make_step, batch_sizes, repeats=10):
    return {b: cu.throughput(make_step(b), b, repeats=repeats).samples_per_s for b in batch_sizes}


def sweep_steps_per_second(make_step, batch_sizes):
    return {b: 1 / cu.time_fn(make_step(b), repeats=10).median for b in batch_sizes}


def sweep_one_step_for_all(make_step, batch_sizes):
    step = make_step(batch_sizes[0])
    return {b: cu.throughput(step, b, repeats=10).samples_per_s for b in batch_sizes}


def _largest(model, make_input, budget, candidates, fits):
    best = None
    for b in candidates:
        if not fits(cu.activation_bytes(lambda: model(make_input(b))), budget):  # noqa: B023
            break
        best = b
    return best


def largest(model, make_input, budget, candidates):
    return _largest(model, make_input, budget, candidates, lambda used, budget: used <= budget)


def largest_strict(model, make_input, budget, candidates):
    return _largest(model, make_input, budget, candidates, lambda used, budget: used < budget)


def first_that_does_not_fit(model, make_input, budget, candidates):
    for b in candidates:
        if cu.activation_bytes(lambda: model(make_input(b))) > budget:  # noqa: B023
            return b
    return candidates[-1]


def largest_under_no_grad(model, make_input, budget, candidates):
    with torch.no_grad():
        return largest(model, make_input, budget, candidates)


def _lambda_schedule(factor):
    def make(optimizer, batch_size, warmup_steps, base_batch=256):
        k = batch_size / base_batch
        return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda t: factor(t, k, warmup_steps))

    return make


schedule = _lambda_schedule(lambda t, k, w: 1 + (k - 1) * min(t, w) / w)
schedule_sqrt = _lambda_schedule(lambda t, k, w: 1 + (math.sqrt(k) - 1) * min(t, w) / w)
schedule_no_warmup = _lambda_schedule(lambda t, k, w: k)
schedule_from_zero = _lambda_schedule(lambda t, k, w: k * min(t, w) / w)
schedule_one_step_early = _lambda_schedule(lambda t, k, w: 1 + (k - 1) * min(t + 1, w) / w)


def schedule_as_list(optimizer, batch_size, warmup_steps, base_batch=256):
    return [0.1] * 10


def _mean_sq(gradient, b, n):
    return torch.stack([gradient(b).pow(2).sum() for _ in range(n)]).mean()


def noise_scale(gradient, b_small, b_big, n):
    small, big = _mean_sq(gradient, b_small, n), _mean_sq(gradient, b_big, n)
    g2 = (b_big * big - b_small * small) / (b_big - b_small)
    trace = (small - big) / (1 / b_small - 1 / b_big)
    return float(trace / g2)


def noise_scale_biased(gradient, b_small, b_big, n):
    """|G_big|^2 taken as |G|^2: biased upwards by tr(Sigma)/B_big."""
    small, big = _mean_sq(gradient, b_small, n), _mean_sq(gradient, b_big, n)
    trace = (small - big) / (1 / b_small - 1 / b_big)
    return float(trace / big)


def noise_scale_swapped(gradient, b_small, b_big, n):
    """Each norm paired with the other batch size."""
    small, big = _mean_sq(gradient, b_small, n), _mean_sq(gradient, b_big, n)
    g2 = (b_big * small - b_small * big) / (b_big - b_small)
    trace = (big - small) / (1 / b_small - 1 / b_big)
    return float(trace / g2)


def noise_scale_unsquared(gradient, b_small, b_big, n):
    """Norms instead of squared norms."""
    small = torch.stack([gradient(b_small).norm() for _ in range(n)]).mean()
    big = torch.stack([gradient(b_big).norm() for _ in range(n)]).mean()
    g2 = (b_big * big - b_small * small) / (b_big - b_small)
    trace = (small - big) / (1 / b_small - 1 / b_big)
    return float(trace / g2)


# --- exercise 1: throughput sweep ----------------------------------------------------------


def test_throughput_sweep_passes_a_correct_sweep():
    assert status_of(lesson.check_throughput_sweep, sweep) == "passed"


@pytest.mark.parametrize("wrong", [sweep_steps_per_second, sweep_one_step_for_all])
def test_throughput_sweep_fails_steps_per_second_and_one_step_for_all_sizes(wrong):
    assert fails(lesson.check_throughput_sweep, wrong) == "failed"


def test_throughput_sweep_fails_a_result_without_every_batch_size():
    assert (
        status_of(lesson.check_throughput_sweep, lambda make_step, sizes: {sizes[0]: 1.0})
        == "failed"
    )


def test_throughput_sweep_not_attempted():
    assert status_of(lesson.check_throughput_sweep, not_attempted) == "not-attempted"


# --- exercise 2: largest batch within a budget ----------------------------------------------


def test_largest_batch_passes_the_last_batch_that_fits():
    assert status_of(lesson.check_largest_batch, largest) == "passed"


@pytest.mark.parametrize("wrong", [first_that_does_not_fit, largest_strict, largest_under_no_grad])
def test_largest_batch_fails_off_by_one_strict_budget_and_no_grad(wrong):
    assert fails(lesson.check_largest_batch, wrong) == "failed"


def test_largest_batch_not_attempted():
    assert status_of(lesson.check_largest_batch, not_attempted) == "not-attempted"


# --- exercise 3: linear scaling with warm-up ------------------------------------------------


def test_lr_scaling_passes_goyal_warmup_from_the_base_lr():
    assert status_of(lesson.check_lr_schedule, schedule) == "passed"


@pytest.mark.parametrize(
    "wrong", [schedule_sqrt, schedule_no_warmup, schedule_from_zero, schedule_one_step_early]
)
def test_lr_scaling_fails_sqrt_no_warmup_warmup_from_zero_and_off_by_one(wrong):
    assert fails(lesson.check_lr_schedule, wrong) == "failed"


def test_lr_scaling_reports_a_list_instead_of_a_scheduler_as_an_error():
    assert status_of(lesson.check_lr_schedule, schedule_as_list) == "error"


def test_lr_scaling_not_attempted():
    assert status_of(lesson.check_lr_schedule, not_attempted) == "not-attempted"


# --- exercise 4: gradient noise scale --------------------------------------------------------


def test_noise_scale_passes_the_unbiased_estimator():
    assert status_of(lesson.check_noise_scale, noise_scale) == "passed"


@pytest.mark.parametrize("wrong", [noise_scale_biased, noise_scale_swapped, noise_scale_unsquared])
def test_noise_scale_fails_biased_swapped_and_unsquared_estimators(wrong):
    assert fails(lesson.check_noise_scale, wrong) == "failed"


def test_noise_scale_not_attempted():
    assert status_of(lesson.check_noise_scale, not_attempted) == "not-attempted"


# --- the helpers the checks rely on ----------------------------------------------------------


def test_noisy_regression_moments_match_monte_carlo():
    """The closed-form |G|^2 and tr(Sigma) agree with sampled per-sample gradients."""
    problem = lesson.NoisyRegression(
        dim=8, noise_var=0.5, scales=torch.linspace(0.5, 2.0, 8), seed=5
    )
    grads = torch.stack([problem.gradient(1) for _ in range(4000)])
    assert grads.mean(0).pow(2).sum().item() == pytest.approx(problem.grad_sq_norm, rel=0.15)
    assert grads.var(0).sum().item() == pytest.approx(problem.trace_sigma, rel=0.1)


def test_reference_noise_scale_is_within_15_percent_over_seeds():
    errors = []
    with lesson.steady_cpu():
        for seed in range(5):
            problem = lesson.NoisyRegression(dim=128, noise_var=1.0, seed=seed)
            estimate = lesson.reference_noise_scale(problem.gradient, 32, 256, 200)
            errors.append(abs(estimate / problem.b_simple - 1))
    assert max(errors) < 0.15


def test_saturation_batch_is_the_smallest_batch_near_the_best():
    assert lesson.saturation_batch({4: 10.0, 16: 70.0, 64: 90.0, 256: 100.0}, 0.8) == 64


def test_fit_critical_batch_recovers_known_parameters():
    runs = {b: (20 * (1 + 50 / b), 0.1) for b in (1, 4, 16, 64, 256, 1024)}
    s_min, b_crit = lesson.fit_critical_batch(runs)
    assert s_min == pytest.approx(20, rel=1e-6) and b_crit == pytest.approx(50, rel=1e-6)


def test_steps_to_target_shows_diminishing_returns():
    runs = lesson.steps_to_target([1, 64, 1024])
    assert runs[64][0] < runs[1][0] / 10  # nearly perfect scaling below the critical batch
    assert runs[1024][0] > runs[64][0] / 4  # far from 16x fewer steps past it
    assert runs[64][1] > runs[1][1]  # the best LR grows with the batch


def test_steady_cpu_restores_the_thread_count():
    before = torch.get_num_threads()
    with lesson.steady_cpu():
        pass
    assert torch.get_num_threads() == before


def test_largest_batch_cuda_stops_at_out_of_memory_and_at_the_budget(monkeypatch):
    """The CUDA probe, with the allocator faked: OOM from batch 64 on, 1000 bytes per sample."""
    memory = {"peak": 0}
    for name in ("empty_cache", "reset_peak_memory_stats", "synchronize"):
        monkeypatch.setattr(torch.cuda, name, lambda *a, **k: None)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda *a, **k: 0)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda *a, **k: memory["peak"])

    def make_step(b):
        if b >= 64:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory (faked)")

        def step():
            memory["peak"] = 1000 * b

        return step

    candidates = [8, 16, 32, 64, 128]
    assert lesson.largest_batch_cuda(make_step, candidates) == (32, {8: 8000, 16: 16000, 32: 32000})
    assert lesson.largest_batch_cuda(make_step, candidates, budget_bytes=20000)[0] == 16
