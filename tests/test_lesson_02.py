"""Lesson 02 (batch size): each check passes correct solutions, valid alternatives included,
fails the half-understood ones with a message naming the cause, and reports not-attempted for
the untouched stub. The CUDA probe runs against a faked torch.cuda."""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import pytest
import torch
from check_helpers import fails, failure, not_attempted, status_of
from judge_helpers import remote_verdict

import course_utils as cu
from course_utils import mode
from course_utils.lessons import batch_size as lesson


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


def _colleague_fixed(one_step=False, one_call=False):
    """The colleague's sweep (lesson.colleague_sweep) with the faults not fixed left in."""
    import statistics
    import time

    def sweep(make_step, batch_sizes):
        first = make_step(batch_sizes[0]) if one_step else None
        out = {}
        for b in batch_sizes:
            step = first if one_step else make_step(b)
            if one_call:
                start = time.perf_counter()
                step()
                out[b] = b / (time.perf_counter() - start)
                continue
            step()
            step()
            times = []
            for _ in range(5):
                start = time.perf_counter()
                step()
                cu.synchronize()
                times.append(time.perf_counter() - start)
            out[b] = b / statistics.median(times)
        return out

    return sweep


def test_throughput_sweep_names_both_faults_of_the_colleagues_sweep_as_given():
    """Exercise 1 starts from lesson.colleague_sweep: one step for every size, and one call
    timed (the first, for the first size). Both are named, each confirmed by a rerun."""
    exc = failure(lesson.check_throughput_sweep, lesson.colleague_sweep)
    assert exc.status == "failed"
    assert "every size ran the first size's step" in exc.summary
    assert "includes the first call" in exc.summary


@pytest.mark.parametrize(
    "left, cause, not_cause",
    [
        (dict(one_step=True), "every size ran the first size's step", "first call"),
        (dict(one_call=True), "it times the first call", "every size ran"),
        (dict(one_step=True, one_call=True), "includes the first call", "steps/s"),
    ],
    ids=["one-step-left", "one-call-left", "both-left"],
)
def test_throughput_sweep_names_each_fault_a_partial_fix_of_the_colleague_leaves(
    left, cause, not_cause
):
    exc = failure(lesson.check_throughput_sweep, _colleague_fixed(**left))
    assert exc.status == "failed" and cause in exc.summary, exc.summary
    assert not_cause not in exc.summary, exc.summary


def test_throughput_sweep_passes_the_colleagues_sweep_with_its_faults_fixed():
    assert status_of(lesson.check_throughput_sweep, _colleague_fixed()) == "passed"


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


# --- exercise 3: gradient noise scale ---------------------------------------------------------------


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
    ],
    ids=["02-throughput-sweep", "02-largest-batch", "02-noise-scale"],
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
    ],
    ids=["steps-per-second", "keeps-previous-step", "big-batch-norm-as-true"],
)
def test_judged_remotely_a_wrong_answer_fails_as_in_a_notebook(red_team, check, check_id, answer):
    """A red-team wrong answer gets the same verdict from the judge as in a notebook (the
    previous step kept: the simulated device's reading crosses with the probe's result)."""
    here = status_of(check, getattr(red_team, answer))
    there = remote_verdict(check_id, f"test_02_batch_size:{answer}")
    assert here == there["status"] == "failed", there["message"]
