"""Lesson 01 checks: correct solutions pass, the mistakes learners make fail, stubs are not-attempted."""

from __future__ import annotations

import math
import os

os.environ.setdefault("COURSE_DATASET", "offline")  # tests never download

import numpy as np
import pytest
from check_helpers import failure, not_attempted
from torch.optim.lr_scheduler import OneCycleLR

from course_utils.lessons import one_cycle as lesson

FAST_SWEEP = dict(start_lr=1e-5, end_lr=1e3, num_steps=30, beta=0.9, blowup=4.0)


@pytest.fixture
def fast_sweep(monkeypatch):
    """A short sweep on a narrow model: enough to show structural mistakes, not to calibrate."""
    monkeypatch.setattr(lesson, "RANGE_SWEEP", FAST_SWEEP)
    monkeypatch.setattr(lesson, "RANGE_WIDTH", 8)


# --- range test: variants of the reference with one mistake each ---------------------------


def range_test(*, linear=False, bias_correct=True, smooth=True, stop=True, apply_lr=True):
    def run(model, optimizer, batches, loss_fn, *, start_lr, end_lr, num_steps, beta, blowup):
        lrs, losses, avg, best = [], [], 0.0, math.inf
        for i in range(num_steps):
            if linear:
                lr = start_lr + (end_lr - start_lr) * i / (num_steps - 1)
            else:
                lr = start_lr * (end_lr / start_lr) ** (i / (num_steps - 1))
            if apply_lr:
                for group in optimizer.param_groups:
                    group["lr"] = lr
            x, y = next(batches)
            loss = loss_fn(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            avg = beta * avg + (1 - beta) * loss.item()
            value = (
                (avg / (1 - beta ** (i + 1)) if bias_correct else avg) if smooth else loss.item()
            )
            lrs.append(lr)
            losses.append(value)
            best = min(best, value)
            if stop and (not math.isfinite(value) or value > blowup * best):
                break
        return lrs, losses

    return run


def test_range_check_passes_the_reference():
    result = lesson.check_lr_range_test(lesson.reference_lr_range_test, lesson.reference_suggest_lr)
    assert result.status == "passed"
    lo, hi = lesson.RANGE_WINDOW
    assert lo <= result.parts[-1].value <= hi


def test_range_check_passes_the_min_over_ten_rule():
    def min_over_ten(lrs, losses):
        return lrs[int(np.nanargmin(losses))] / 10

    assert lesson.check_lr_range_test(range_test(), min_over_ten).status == "passed"


@pytest.mark.parametrize(
    ("mistake", "expected"),
    [
        (dict(linear=True), "linear sweep"),
        (dict(bias_correct=False), "bias correction"),
        (dict(smooth=False), "zig-zag"),
        (dict(stop=False), "ran all"),
        (dict(apply_lr=False), "set group['lr']"),
    ],
    ids=["linear-sweep", "no-bias-correction", "raw-losses", "never-stops", "lr-not-applied"],
)
def test_range_check_fails_a_flawed_sweep(fast_sweep, mistake, expected):
    exc = failure(lesson.check_lr_range_test, range_test(**mistake), lesson.reference_suggest_lr)
    assert exc.status == "failed"
    assert expected in exc.summary


@pytest.mark.parametrize(
    "suggest",
    [lambda lrs, losses: lrs[-1], lambda lrs, losses: lrs[int(np.nanargmin(losses))]],
    ids=["lr-where-it-blew-up", "lr-at-minimum-without-tenth"],
)
def test_range_check_fails_a_suggestion_outside_the_window(suggest):
    exc = failure(lesson.check_lr_range_test, lesson.reference_lr_range_test, suggest)
    assert exc.status == "failed"
    assert "suggested lr" in exc.summary


def test_range_check_reports_not_attempted():
    assert (
        failure(lesson.check_lr_range_test, not_attempted, lesson.reference_suggest_lr).status
        == "not-attempted"
    )
    assert (
        failure(lesson.check_lr_range_test, lesson.reference_lr_range_test, not_attempted).status
        == "not-attempted"
    )


# --- one-cycle: the reference loop with one mistake each -----------------------------------


def fit(*, per_epoch=False, steps=None, div_factor=25.0, step_first=False, cycle_momentum=True):
    def run(model, optimizer, loader, *, epochs, max_lr, loss_fn):
        if steps is None:
            scheduler = OneCycleLR(
                optimizer,
                max_lr=max_lr,
                epochs=epochs,
                steps_per_epoch=len(loader),
                div_factor=div_factor,
                cycle_momentum=cycle_momentum,
            )
        else:
            scheduler = OneCycleLR(optimizer, max_lr=max_lr, total_steps=steps(epochs, loader))
        for _ in range(epochs):
            for x, y in loader:
                loss = loss_fn(model(x), y)
                optimizer.zero_grad()
                loss.backward()
                if step_first and not per_epoch:
                    scheduler.step()
                optimizer.step()
                if not per_epoch and not step_first:
                    scheduler.step()
            if per_epoch:
                scheduler.step()
        return scheduler

    return run


def test_one_cycle_check_passes_the_reference():
    assert lesson.check_one_cycle(lesson.reference_fit_one_cycle).status == "passed"


def test_one_cycle_check_passes_total_steps_form():
    assert (
        lesson.check_one_cycle(fit(steps=lambda epochs, loader: epochs * len(loader))).status
        == "passed"
    )


@pytest.mark.parametrize(
    ("wrong", "expected"),
    [
        (fit(per_epoch=True, steps=lambda epochs, loader: epochs), "not once per epoch"),
        (fit(per_epoch=True), "not once per epoch"),
        (fit(steps=lambda epochs, loader: epochs), "ran out"),
        (
            fit(steps=lambda epochs, loader: epochs * (len(loader.dataset) // loader.batch_size)),
            "ran out",
        ),
        (fit(steps=lambda epochs, loader: epochs * len(loader.dataset)), "never reaching max_lr"),
        (fit(div_factor=10.0), "max_lr/10"),
        (fit(step_first=True), "one step ahead"),
        (fit(cycle_momentum=False), "0.95 -> 0.85 -> 0.95"),
    ],
    ids=[
        "stepped-per-epoch",
        "stepped-per-epoch-with-batch-count",
        "total-steps-is-epochs",
        "floor-division-steps-per-epoch",
        "steps-per-epoch-is-dataset-size",
        "div-factor-10-from-the-seed",
        "scheduler-before-optimizer",
        "no-momentum-cycle",
    ],
)
def test_one_cycle_check_fails_a_wrong_schedule(wrong, expected):
    exc = failure(lesson.check_one_cycle, wrong)
    assert exc.status == "failed"
    assert expected in exc.summary


def test_one_cycle_check_reports_not_attempted():
    assert failure(lesson.check_one_cycle, not_attempted).status == "not-attempted"


# --- AdamW: the manual update with one mistake each ----------------------------------------


def adam(*, decouple=True, lr_in_decay=True, decay_after=False, bias_correct=True):
    def step(
        p, grad, m, v, t, *, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, decoupled=False
    ):
        beta1, beta2 = betas
        shrink = (1 - lr * weight_decay) if lr_in_decay else (1 - weight_decay)
        if decoupled and decouple and not decay_after:
            p = p * shrink
        elif not (decoupled and decouple):
            grad = grad + weight_decay * p
        m = beta1 * m + (1 - beta1) * grad
        v = beta2 * v + (1 - beta2) * grad * grad
        m_hat, v_hat = (m / (1 - beta1**t), v / (1 - beta2**t)) if bias_correct else (m, v)
        p = p - lr * m_hat / (v_hat.sqrt() + eps)
        if decoupled and decouple and decay_after:
            p = p * shrink
        return p, m, v

    return step


def test_adamw_check_passes_the_reference():
    result = lesson.check_adamw(lesson.reference_adam_step)
    assert result.status == "passed"
    assert result.parts[-1].value > 1e-3  # AdamW and Adam + L2 really differ


@pytest.mark.parametrize(
    ("wrong", "expected"),
    [
        (adam(decouple=False), "AdamW (decoupled=True)"),
        (adam(lr_in_decay=False), "AdamW (decoupled=True)"),
        (adam(decay_after=True), "AdamW (decoupled=True)"),
        (adam(bias_correct=False), "Adam + L2 (decoupled=False)"),
    ],
    ids=["adamw-as-l2", "decay-without-lr", "decay-after-the-step", "no-bias-correction"],
)
def test_adamw_check_fails_a_wrong_update(wrong, expected):
    exc = failure(lesson.check_adamw, wrong)
    assert exc.status == "failed"
    assert f"{expected}: largest difference" in exc.summary
    assert "above the" in exc.summary


def test_adamw_check_reports_not_attempted():
    assert failure(lesson.check_adamw, not_attempted).status == "not-attempted"


def test_decay_demo_shows_l2_decay_depends_on_gradient_size():
    left = lesson.decay_demo(lesson.reference_adam_step, steps=100)
    l2, decoupled = left["Adam + L2"], left["AdamW"]
    assert l2[0] < 0.5 < l2[-1]  # small gradients: decayed hard; large ones: hardly at all
    assert max(decoupled) - min(decoupled) < 0.05  # AdamW: the same shrink for every weight
