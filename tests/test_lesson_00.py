"""Lesson 00's checks pass the reference answers and fail the mistakes learners make."""

from __future__ import annotations

import time

import pytest
import torch
from check_helpers import fails, not_attempted

from course_utils.lessons import measuring as lesson
from course_utils.measure import activation_bytes

# --- exercise 1: step timer -----------------------------------------------------------------


def test_step_timer_check_passes_a_synchronised_warmed_up_median():
    assert lesson.check_step_timer(lesson.reference_time_step).status == "passed"


def test_step_timer_check_fails_a_timer_without_synchronisation():
    def no_sync(step, synchronize, warmup=3, repeats=10):
        return lesson.reference_time_step(step, lambda: None, warmup, repeats)

    assert fails(lesson.check_step_timer, no_sync) == "failed"


def test_step_timer_check_fails_a_mean_without_warm_up():
    def mean_cold(step, synchronize, warmup=3, repeats=10):
        samples = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            step()
            synchronize()
            samples.append(time.perf_counter() - t0)
        return sum(samples) / len(samples)

    assert fails(lesson.check_step_timer, mean_cold) == "failed"


def test_step_timer_check_fails_milliseconds_instead_of_seconds():
    def in_ms(step, synchronize, warmup=3, repeats=10):
        return 1e3 * lesson.reference_time_step(step, synchronize, warmup, repeats)

    assert fails(lesson.check_step_timer, in_ms) == "failed"


def test_step_timer_check_reports_not_attempted():
    assert fails(lesson.check_step_timer, not_attempted) == "not-attempted"


def test_naive_timer_misses_queued_work():
    step, synchronize = lesson.make_async_step(step_s=0.02, first_call_s=0.0)
    assert lesson.naive_time(step, repeats=3) < 0.005
    synchronize()


# --- exercise 2: bytes saved for backward -------------------------------------------------


def counting_every_save(forward):
    total = 0

    def pack(t):
        nonlocal total
        base = t if t._base is None else t._base
        if not (base.is_leaf and base.requires_grad):
            total += t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        forward()
    return total


def counting_parameters_too(forward):
    seen = {}

    def pack(t):
        seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        forward()
    return sum(seen.values())


def test_activation_check_passes_the_harness_method():
    assert lesson.check_activation_bytes(activation_bytes).status == "passed"


@pytest.mark.parametrize("wrong", [counting_every_save, counting_parameters_too])
def test_activation_check_fails_double_counting_and_parameters(wrong):
    assert fails(lesson.check_activation_bytes, wrong) == "failed"


def test_activation_check_reports_error_for_a_crashing_answer():
    assert fails(lesson.check_activation_bytes, lambda forward: 1 / 0) == "error"


# --- exercise 3: FLOPs of a training step ---------------------------------------------------


def reference_flops(batch, dims):
    layers = list(zip(dims[:-1], dims[1:], strict=True))
    return sum(6 * batch * a * b for a, b in layers) - 2 * batch * layers[0][0] * layers[0][1]


def test_flops_check_passes_the_exact_count():
    assert lesson.check_train_flops(reference_flops).status == "passed"


@pytest.mark.parametrize(
    "wrong",
    [
        lambda b, d: sum(
            6 * b * x * y for x, y in zip(d[:-1], d[1:], strict=True)
        ),  # input grad of layer 1
        lambda b, d: sum(
            4 * b * x * y for x, y in zip(d[:-1], d[1:], strict=True)
        ),  # backward = forward
        lambda b, d: sum(2 * b * x * y for x, y in zip(d[:-1], d[1:], strict=True)),  # forward only
    ],
    ids=["first-layer-input-grad", "backward-equals-forward", "forward-only"],
)
def test_flops_check_fails_common_miscounts(wrong):
    assert fails(lesson.check_train_flops, wrong) == "failed"
