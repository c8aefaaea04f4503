"""Lesson 08's checks pass the reference answers and valid alternatives, and fail the
mistakes learners make when they compute, clip and scale gradient norms."""

from __future__ import annotations

import importlib
import math
import os
import statistics
from pathlib import Path

import pytest
import torch
from check_helpers import fails, failure, not_attempted, status_of
from judge_helpers import remote_verdict
from torch import nn

from course_utils.checks import REGISTRY
from course_utils.lessons import clipping as lesson

# --- exercise 1: total norm -----------------------------------------------------------------


def stacked_norms(parameters, norm_type=2.0):
    grads = [p.grad for p in parameters if p.grad is not None]
    return torch.linalg.vector_norm(
        torch.stack([torch.linalg.vector_norm(g, norm_type) for g in grads]), norm_type
    )


def manual_loop(parameters, norm_type=2.0):
    total = 0.0
    for p in parameters:
        if p.grad is None:
            continue
        if math.isinf(norm_type):
            total = max(total, p.grad.abs().max().item())
        else:
            total += (p.grad.abs() ** norm_type).sum().item()
    return total if math.isinf(norm_type) else total ** (1 / norm_type)


def flattened(parameters, norm_type=2.0):
    grads = [p.grad.flatten() for p in parameters if p.grad is not None]
    return torch.linalg.vector_norm(torch.cat(grads), norm_type)


@pytest.mark.parametrize("answer", [stacked_norms, manual_loop, flattened])
def test_total_norm_passes_the_reference_and_alternatives(answer):
    assert lesson.check_total_norm(lesson.reference_total_norm).status == "passed"
    assert lesson.check_total_norm(answer).status == "passed"


def sum_of_norms(parameters, norm_type=2.0):
    return sum(
        torch.linalg.vector_norm(p.grad, norm_type) for p in parameters if p.grad is not None
    )


def always_two_norm(parameters, norm_type=2.0):
    return stacked_norms(parameters, 2.0)


def generator_used_twice(parameters, norm_type=2.0):
    with_grad = sum(1 for p in parameters if p.grad is not None)  # uses the generator up
    total = sum((p.grad.abs() ** norm_type).sum() for p in parameters if p.grad is not None)
    return total ** (1 / norm_type) if with_grad else 0.0


def crashes_on_none(parameters, norm_type=2.0):
    return torch.linalg.vector_norm(
        torch.stack([torch.linalg.vector_norm(p.grad, norm_type) for p in parameters]), norm_type
    )


def delegates(parameters, norm_type=2.0):
    return nn.utils.clip_grad_norm_(parameters, float("inf"), norm_type)


def clips_while_measuring(parameters, norm_type=2.0):
    params = list(parameters)
    norm = stacked_norms(params, norm_type)
    for p in params:
        if p.grad is not None:
            p.grad.mul_(0.5)
    return norm


@pytest.mark.parametrize(
    ("wrong", "message"),
    [
        (sum_of_norms, "SUM of the per-tensor norms"),
        (always_two_norm, "largest |gradient| entry"),
        (generator_used_twice, "generator"),
        (clips_while_measuring, "CHANGED the gradients"),
    ],
)
def test_total_norm_fails_common_mistakes_naming_the_cause(wrong, message):
    assert message in failure(lesson.check_total_norm, wrong).summary


def test_total_norm_reports_errors_for_none_grads_and_delegation():
    assert fails(lesson.check_total_norm, crashes_on_none) == "error"
    assert "off limits" in failure(lesson.check_total_norm, delegates).summary


def test_total_norm_stub_and_reference_delegation():
    assert fails(lesson.check_total_norm, not_attempted) == "not-attempted"
    assert (
        fails(lesson.check_total_norm, lambda p, n=2.0: lesson.reference_total_norm(p, n))
        == "failed"
    )


# --- exercise 2: clipped step ---------------------------------------------------------------


def clip_by_value(model, loss_fn, x, y, optimizer, max_norm):
    optimizer.zero_grad()
    loss_fn(model(x), y).backward()
    nn.utils.clip_grad_value_(model.parameters(), max_norm)
    optimizer.step()
    return max_norm


def clip_before_backward(model, loss_fn, x, y, optimizer, max_norm):
    optimizer.zero_grad()
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    loss_fn(model(x), y).backward()
    optimizer.step()
    return norm


def clip_after_step(model, loss_fn, x, y, optimizer, max_norm):
    optimizer.zero_grad()
    loss_fn(model(x), y).backward()
    optimizer.step()
    return nn.utils.clip_grad_norm_(model.parameters(), max_norm)


def manual_scaling(model, loss_fn, x, y, optimizer, max_norm):
    """A valid alternative: scale the gradients by hand."""
    optimizer.zero_grad()
    loss_fn(model(x), y).backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    norm = torch.linalg.vector_norm(torch.stack([g.norm() for g in grads]))
    for g in grads:
        g.mul_(torch.clamp(max_norm / (norm + 1e-6), max=1.0))
    optimizer.step()
    return norm


def test_clipped_step_passes_reference_and_manual_scaling():
    assert lesson.check_clipped_step(manual_scaling).status == "passed"


@pytest.mark.parametrize(
    ("wrong", "message"),
    [
        (clip_by_value, "by value"),
        (clip_before_backward, "UNCLIPPED"),
        (clip_after_step, "UNCLIPPED"),
    ],
)
def test_clipped_step_fails_misplaced_or_by_value_clipping(wrong, message):
    assert message in failure(lesson.check_clipped_step, wrong).summary


def test_clipped_step_stub_and_reference_delegation():
    assert fails(lesson.check_clipped_step, not_attempted) == "not-attempted"
    assert (
        fails(lesson.check_clipped_step, lambda *a: lesson.reference_clipped_step(*a)) == "failed"
    )


def test_unclipped_rnn_diverges_and_clipped_trains():
    assert lesson.train_rnn(lesson.unclipped_step, None, steps=150).diverged
    run = lesson.train_rnn(lesson.reference_clipped_step, 1.0, steps=150)
    assert run.final_loss < 0.5 * run.loss[0]


# --- exercise 3: threshold from a history -------------------------------------------------


def finite(norms):
    return [n for n in norms if math.isfinite(n)]


@pytest.mark.parametrize(
    "answer",
    [
        lambda n: statistics.median(finite(n)),
        lambda n: sorted(finite(n))[int(0.9 * len(finite(n)))],  # 90th percentile
        lambda n: 2 * statistics.median(finite(n)),
    ],
    ids=["median", "p90", "twice-median"],
)
def test_max_norm_passes_robust_rules(answer):
    assert lesson.check_choose_max_norm(answer).status == "passed"


@pytest.mark.parametrize(
    "wrong",
    [
        lambda n: statistics.fmean(n),  # NaN from the tail
        lambda n: statistics.fmean(finite(n)),  # pulled up by the spikes
        lambda n: max(finite(n)),
        lambda n: min(n),
        lambda n: sorted(finite(n))[int(0.99 * len(finite(n)))],
    ],
    ids=["mean", "finite-mean", "max", "min", "p99"],
)
def test_max_norm_fails_statistics_the_spikes_or_nans_dominate(wrong):
    assert fails(lesson.check_choose_max_norm, wrong) == "failed"


def test_max_norm_stub_and_reference_delegation():
    assert fails(lesson.check_choose_max_norm, not_attempted) == "not-attempted"
    assert (
        fails(lesson.check_choose_max_norm, lambda n: lesson.reference_choose_max_norm(n))
        == "failed"
    )


# --- exercise 4: AMP --------------------------------------------------------------------------


def amp_step(unscale=True, scaler_step=True, item=False, update=True, unscale_after=False,
             by_hand=False, update_first=False, zero_grad=True, dtype=torch.bfloat16):  # fmt: skip
    def step(model, loss_fn, x, y, optimizer, scaler, max_norm):
        if zero_grad:
            optimizer.zero_grad()
        with torch.autocast(x.device.type, dtype=dtype):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        if by_hand:
            for p in model.parameters():
                p.grad.div_(scaler.get_scale())
        elif unscale:
            scaler.unscale_(optimizer)
        norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        if unscale_after:
            scaler.unscale_(optimizer)
        if update_first:
            scaler.update()
        if scaler_step:
            scaler.step(optimizer)
        else:
            optimizer.step()
        if update and not update_first:
            scaler.update()
        return norm.item() if item else norm

    return step


def test_amp_clip_passes_the_right_order():
    assert lesson.check_amp_clipped_step(amp_step()).status == "passed"


@pytest.mark.parametrize(
    ("wrong", "message"),
    [
        (amp_step(unscale=False), "SCALED gradients, before any scaler.unscale_"),
        (amp_step(unscale=False, unscale_after=True), "unscale_(optimizer) came after the clip"),
        (amp_step(scaler_step=False), "not through scaler.step(optimizer)"),
        (amp_step(item=True), "host-device sync"),
        (amp_step(unscale=False, by_hand=True), "divided them AGAIN"),
        (amp_step(update_first=True), "update() ran before scaler.step"),
        (amp_step(zero_grad=False), "still held the previous call's gradients"),
        (amp_step(dtype=torch.float16), "output was float16"),
    ],
    ids=[
        "no-unscale",
        "unscale-after-clip",
        "optimizer-step",
        "item",
        "by-hand",
        "update-before-step",
        "no-zero-grad",
        "fp16-on-cpu",
    ],  # fmt: skip
)
def test_amp_clip_fails_each_mistake_naming_it(wrong, message):
    assert message in failure(lesson.check_amp_clipped_step, wrong).summary


@pytest.mark.parametrize(
    ("wrong", "not_named"),
    [
        (amp_step(unscale=False, by_hand=True), "SCALED"),  # it unscaled: twice, not never
        (amp_step(unscale=False, unscale_after=True), "before any scaler.unscale_"),
        (amp_step(update_first=True), "never called"),  # update() was called, too early
        (amp_step(dtype=torch.float16), "unscale"),  # the order is right, the dtype is not
    ],
    ids=["by-hand", "unscale-after-clip", "update-before-step", "fp16-on-cpu"],
)
def test_amp_clip_does_not_name_a_cause_the_answer_does_not_have(wrong, not_named):
    summary = failure(lesson.check_amp_clipped_step, wrong).summary
    failing = [part for part in summary.split(";") if "as a tensor" not in part]
    assert not any(not_named in part for part in failing), summary


def test_amp_clip_without_update_fails_naming_update():
    failed = failure(lesson.check_amp_clipped_step, amp_step(update=False))
    assert failed.status == "failed" and "scaler.update() was never called" in failed.summary


def test_amp_clip_stub_and_reference_delegation():
    assert fails(lesson.check_amp_clipped_step, not_attempted) == "not-attempted"
    assert (
        fails(lesson.check_amp_clipped_step, lambda *a: lesson.reference_amp_clipped_step(*a))
        == "failed"
    )


# --- judged as `course grade` judges: the check's body here, the answer in another process ---

REFERENCE = "course_utils.lessons.clipping.reference"
REDTEAM = Path(__file__).resolve().parent / "redteam"


@pytest.fixture
def redteam_answers(monkeypatch):
    """The red team's answers importable by "module:name", here and in the judged process."""
    monkeypatch.syspath_prepend(str(REDTEAM))
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(REDTEAM), os.environ.get("PYTHONPATH", "")])
    )


JUDGED = [  # check id, its reference answer, a wrong answer of the red team (module:name)
    ("08-total-norm", "reference_total_norm", "test_08_clipping:wrong_sum_of_norms"),
    ("08-clipped-step", "reference_clipped_step", "test_08_clipping:wrong_clip_by_value"),
    ("08-max-norm", "reference_choose_max_norm", "test_08_clipping:wrong_mean"),
    ("08-amp-clip", "reference_amp_clipped_step", "test_08_clipping:wrong_no_unscale"),
]


@pytest.mark.parametrize(("check_id", "reference", "wrong"), JUDGED, ids=[j[0] for j in JUDGED])
def test_the_judge_passes_the_reference_and_grades_a_wrong_answer_as_the_notebook_does(
    check_id, reference, wrong, redteam_answers
):
    """Every call of the learner's code goes through a probe, results cross as data, and
    nothing is shared between a probe and the body: judged with the answer in another
    process (tests/judge_helpers.py), the reference passes, and a red-team answer gets the
    status it gets in a notebook."""
    judged = remote_verdict(check_id, f"{REFERENCE}:{reference}")
    assert judged["status"] == "passed", judged["message"]
    module, _, name = wrong.partition(":")
    in_notebook = status_of(REGISTRY[check_id], getattr(importlib.import_module(module), name))
    judged = remote_verdict(check_id, wrong)
    assert judged["status"] == in_notebook, judged["message"]
