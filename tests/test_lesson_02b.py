"""Lesson 02b (large batches), check 02b-lr-scaling: it passes the two rules written with
LambdaLR or LinearLR, fails the half-understood schedules naming a fault only when that fault
reproduces every LR of every param group, names each fault the colleague's schedule still has,
and reports not-attempted for the untouched stub; and what linear scaling buys on the
regression (time to target). LARS and the optimizer choice have their own files."""

from __future__ import annotations

import importlib
import math
import os
from pathlib import Path

import pytest
import torch
from check_helpers import fails, failure, not_attempted, status_of
from judge_helpers import remote_verdict

from course_utils import mode
from course_utils.lessons import large_batch as lesson
from course_utils.lessons.large_batch import lr_check


@pytest.fixture(autouse=True)
def quick():
    mode.set_quick(True)
    yield
    mode.set_quick(None)


# --- exercise 1: linear scaling with warm-up --------------------------------------------------------


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
    """Exercise 1 starts from lesson.colleague_schedule: its floored k shows on the batches
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


# --- the demos' helpers ----------------------------------------------------------------------


def test_linear_scaling_saves_steps_below_the_critical_batch_and_diverges_far_above():
    runs = lesson.time_to_target({4: 1.0, 16: 1.0, 256: 1.0}, base_batch=4, base_lr=0.1)
    same, scaled = runs["same LR"], runs["linear scaling + warm-up"]
    assert scaled[16][0] < same[16][0] / 2  # 4x the batch, 4x the LR: far fewer steps
    assert math.isinf(scaled[256][0])  # 64x the LR is past the stable step size


def test_seconds_per_step_times_the_race_model_at_each_batch():
    seconds = lesson.seconds_per_step([4, 64])
    assert set(seconds) == {4, 64} and all(0 < s < 5 for s in seconds.values())


# --- judged as `course grade` judges: the learner's side in another process --------------------

RED_TEAM = Path(__file__).resolve().parent / "redteam"


def test_judged_remotely_the_reference_passes():
    """Every call to the learner's scheduler goes through a probe, and the probes' data is
    enough for the body to decide: with the learner's side in another process, the reference
    passes (on initial LRs the judge draws afresh)."""
    answer = "course_utils.lessons.large_batch.reference:reference_lr_schedule"
    verdict = remote_verdict("02b-lr-scaling", answer)
    assert verdict["status"] == "passed", verdict["message"]


def test_judged_remotely_a_wrong_answer_fails_as_in_a_notebook(monkeypatch):
    """A red-team wrong answer gets the same verdict from the judge as in a notebook."""
    monkeypatch.syspath_prepend(str(RED_TEAM))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(RED_TEAM), str(RED_TEAM.parent)]))
    wrong = importlib.import_module("test_02_batch_size").sched_floor_division
    here = status_of(lesson.check_lr_schedule, wrong)
    there = remote_verdict("02b-lr-scaling", "test_02_batch_size:sched_floor_division")
    assert here == there["status"] == "failed", there["message"]
