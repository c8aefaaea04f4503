"""Lesson 01's checks pass correct solutions and valid alternatives, fail the mistakes a
learner who half-understands makes (naming the cause), and report stubs as not-attempted."""

from __future__ import annotations

import importlib
import math
import os
from pathlib import Path

os.environ.setdefault("COURSE_DATASET", "offline")  # tests never download

import numpy as np
import pytest
import torch
from check_helpers import failure, not_attempted, status_of
from judge_helpers import remote_verdict
from torch.optim.lr_scheduler import OneCycleLR

from course_utils.lessons import one_cycle as lesson
from course_utils.lessons.one_cycle import judge

FAST_SWEEP = dict(start_lr=1e-5, end_lr=1e3, num_steps=30, beta=0.9, blowup=4.0)


@pytest.fixture
def fast_sweep(monkeypatch):
    """A short sweep on a narrow model: enough to show structural mistakes, not to calibrate."""
    monkeypatch.setattr(judge, "RANGE_SWEEP", FAST_SWEEP)
    monkeypatch.setattr(judge, "RANGE_WIDTH", 8)


@pytest.fixture(scope="module")
def reference_run():
    """The check run once on the reference answers, and the sweep it measured."""
    captured, real = {}, judge.run_range_test

    def spy(fn, *args, **kwargs):
        captured["sweep"] = real(fn, *args, **kwargs)
        return captured["sweep"]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(judge, "run_range_test", spy)
        result = lesson.check_lr_range_test(
            lesson.reference_lr_range_test, lesson.reference_suggest_lr
        )
    return result, captured["sweep"]


@pytest.fixture
def replayed_sweep(monkeypatch, reference_run):
    """The check sees the reference's calibrated sweep again, so suggestion rules are judged
    on the real curve without re-training."""
    monkeypatch.setattr(judge, "run_range_test", lambda fn, *a, **k: reference_run[1])


# --- range test: the reference with one mistake each (the notebook's buggy version has four) --


def range_test(
    *, linear=False, bias_correct=True, smooth=True, stop=True, apply_lr=True, start_at_first=False
):
    def run(model, optimizer, batches, loss_fn, *, start_lr, end_lr, num_steps, beta, blowup):
        lrs, losses, avg, best = [], [], None if start_at_first else 0.0, math.inf
        for i in range(num_steps):
            if linear:
                lr = start_lr + (end_lr - start_lr) * i / (num_steps - 1)
            else:
                lr = start_lr * (end_lr / start_lr) ** (i / (num_steps - 1))
            if apply_lr:
                for group in optimizer.param_groups:
                    group["lr"] = lr
            else:
                optimizer.defaults["lr"] = lr
            x, y = next(batches)
            loss = loss_fn(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if avg is None:
                avg = loss.item()
            avg = beta * avg + (1 - beta) * loss.item()
            corrected = avg / (1 - beta ** (i + 1)) if bias_correct and not start_at_first else avg
            value = corrected if smooth else loss.item()
            lrs.append(lr)
            losses.append(value)
            best = min(best, value)
            if stop and (not math.isfinite(value) or value > blowup * best):
                break
        return lrs, losses

    return run


def test_range_check_passes_the_reference(reference_run):
    assert reference_run[0].status == "passed"


def test_range_check_passes_an_average_started_at_the_first_loss(fast_sweep):
    """No bias correction is needed when the average starts at the first loss: the check must
    not ask for one."""
    result = lesson.check_lr_range_test(range_test(start_at_first=True), lambda *curve: 0.01)
    assert result.status == "passed"


def test_range_check_passes_the_min_over_ten_rule(replayed_sweep):
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
        (dict(apply_lr=False), "optimizer.defaults is only read"),
    ],
    ids=["linear-sweep", "no-bias-correction", "raw-losses", "never-stops", "defaults-lr"],
)
def test_range_check_fails_a_flawed_sweep(fast_sweep, mistake, expected):
    exc = failure(lesson.check_lr_range_test, range_test(**mistake), lambda lrs, losses: 0.01)
    assert exc.status == "failed"
    assert expected in exc.summary


@pytest.mark.parametrize(
    ("suggest", "expected"),
    [
        (lambda lrs, losses: lrs[-1], "diverges"),
        (lambda lrs, losses: lrs[int(np.nanargmin(losses))], "on the edge"),
        (lambda lrs, losses: lrs[0], "crawls"),
    ],
    ids=["lr-where-it-blew-up", "lr-at-minimum-without-tenth", "first-lr-of-the-plateau"],
)
def test_range_check_fails_a_suggestion_outside_the_window(replayed_sweep, suggest, expected):
    exc = failure(lesson.check_lr_range_test, lesson.reference_lr_range_test, suggest)
    assert exc.status == "failed"
    assert "suggested lr" in exc.summary and expected in exc.summary


def test_range_check_reports_not_attempted(fast_sweep):
    assert (
        failure(lesson.check_lr_range_test, not_attempted, lesson.reference_suggest_lr).status
        == "not-attempted"
    )


def test_range_check_fails_a_suggestion_that_calls_the_reference(replayed_sweep):
    def delegating(lrs, losses):
        return lesson.reference_suggest_lr(lrs, losses)

    exc = failure(lesson.check_lr_range_test, lesson.reference_lr_range_test, delegating)
    assert "reference answer" in exc.summary


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
    fit_total = fit(steps=lambda epochs, loader: epochs * len(loader))
    assert lesson.check_one_cycle(fit_total).status == "passed"


def test_one_cycle_check_passes_a_loop_without_the_trailing_scheduler_step():
    """Every optimizer step used the right lr; the scheduler.step() after the last one would
    only set an lr no step uses. The course grades the lr each step used: it passes."""

    def fit_skip_last(model, optimizer, loader, *, epochs, max_lr, loss_fn):
        total = epochs * len(loader)
        scheduler = OneCycleLR(optimizer, max_lr=max_lr, total_steps=total)
        for step, (x, y) in enumerate(b for _ in range(epochs) for b in loader):
            optimizer.zero_grad()
            loss_fn(model(x), y).backward()
            optimizer.step()
            if step < total - 1:
                scheduler.step()
        return scheduler

    result = lesson.check_one_cycle(fit_skip_last)
    assert result.status == "passed" and "changes nothing" in result.message


@pytest.mark.parametrize(
    ("wrong", "expected"),
    [
        (fit(per_epoch=True, steps=lambda epochs, loader: epochs), "after every optimizer.step"),
        (fit(per_epoch=True), "after every optimizer.step"),
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
        "div-factor-10-from-the-guide",
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


# --- AdamW: which parameters decay, and how ---------------------------------------------------


def groups(model, weight_decay, *, decayed=lambda n, p: p.dim() >= 2):
    named = list(model.named_parameters())
    return [
        {"params": [p for n, p in named if decayed(n, p)], "weight_decay": weight_decay},
        {"params": [p for n, p in named if not decayed(n, p)], "weight_decay": 0.0},
    ]


def by_module_type(model, lr, weight_decay):
    """A valid alternative: decay the weights of Conv and Linear modules, found by type."""
    decay = {
        id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Conv2d | torch.nn.Linear)
    }
    return torch.optim.AdamW(
        groups(model, weight_decay, decayed=lambda n, p: id(p) in decay), lr=lr, fused=False
    )


def adam_decoupled_by_name(model, lr, weight_decay):
    """A valid alternative: Adam(decoupled_weight_decay=True), groups by name, other betas."""
    no_decay = ("bias", ".1.weight")  # biases and the BatchNorm scales of SmallCNN's blocks
    return torch.optim.Adam(
        groups(model, weight_decay, decayed=lambda n, p: not n.endswith(no_decay)),
        lr=lr,
        betas=(0.8, 0.99),
        eps=1e-6,
        decoupled_weight_decay=True,
    )


@pytest.mark.parametrize(
    "valid",
    [lesson.reference_configure_optimizer, by_module_type, adam_decoupled_by_name],
    ids=["by-dim", "by-module-type", "adam-decoupled-by-name"],
)
def test_adamw_check_passes_valid_groupings(valid):
    assert lesson.check_adamw(valid).status == "passed"


@pytest.mark.parametrize(
    ("wrong", "expected"),
    [
        (
            lambda m, lr, wd: torch.optim.Adam(m.parameters(), lr=lr, weight_decay=wd),
            "Adam's weight_decay",
        ),
        (
            lambda m, lr, wd: torch.optim.Adam(groups(m, wd), lr=lr),
            "Adam's weight_decay",
        ),
        (
            lambda m, lr, wd: torch.optim.AdamW(m.parameters(), lr=lr, weight_decay=wd),
            "biases or norm parameters decayed",
        ),
        (
            lambda m, lr, wd: torch.optim.AdamW(groups(m, wd)[:1], lr=lr),
            "would never train",
        ),
        (
            lambda m, lr, wd: torch.optim.AdamW(m.parameters(), lr=lr),
            "not by weight_decay",
        ),
        (
            lambda m, lr, wd: torch.optim.SGD(groups(m, wd), lr=lr, momentum=0.9),
            "no Adam step",
        ),
    ],
    ids=[
        "adam-l2-everywhere",
        "adam-l2-grouped",
        "adamw-decays-everything",
        "biases-left-out",
        "weight-decay-argument-ignored",
        "sgd",
    ],
)
def test_adamw_check_fails_and_names_the_mistake(wrong, expected):
    exc = failure(lesson.check_adamw, wrong)
    assert exc.status == "failed"
    assert expected in exc.summary


def test_adamw_check_reports_not_attempted_and_delegation():
    assert failure(lesson.check_adamw, not_attempted).status == "not-attempted"

    def delegating(model, lr, weight_decay):
        return lesson.reference_configure_optimizer(model, lr, weight_decay)

    assert "reference answer" in failure(lesson.check_adamw, delegating).summary


def test_decay_demo_shows_l2_decay_depends_on_gradient_size():
    left = lesson.decay_demo(steps=100)
    l2, decoupled = left["Adam + L2"], left["AdamW"]
    assert l2[0] < 0.5 < l2[-1]  # small gradients: decayed hard; large ones: hardly at all
    assert max(decoupled) - min(decoupled) < 0.05  # AdamW: the same shrink for every weight


def test_warm_up_cosine_schedule_warms_up_then_decays_to_zero():
    param = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.AdamW([param], lr=0.01)
    scheduler = lesson.make_schedule("warm-up + cosine", optimizer, 100, 0.01)
    lrs = []
    for _ in range(100):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert lrs[0] == pytest.approx(0.01 / 25) and max(lrs) == pytest.approx(0.01)
    assert int(np.argmax(lrs)) == 10 and lrs[-1] < 1e-4


# --- judged as `course grade` judges: the learner's side in another process --------------------

REFERENCE = "course_utils.lessons.one_cycle.reference"
RED_TEAM = Path(__file__).resolve().parent / "redteam"


@pytest.fixture
def red_team(monkeypatch):
    """The red team's modules, importable here and in remote_verdict's child process (which
    imports each answer by "module:qualname")."""
    monkeypatch.syspath_prepend(str(RED_TEAM))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(RED_TEAM), str(RED_TEAM.parent)]))
    return importlib.import_module("test_01_one_cycle")


@pytest.mark.parametrize(
    "check_id, answers",
    [
        ("01-lr-range", ("reference_lr_range_test", "reference_suggest_lr")),
        ("01-one-cycle", ("reference_fit_one_cycle",)),
        ("01-adamw", ("reference_configure_optimizer",)),
    ],
    ids=["01-lr-range", "01-one-cycle", "01-adamw"],
)
def test_judged_remotely_the_reference_passes(check_id, answers):
    """Every call to the learner's code goes through a probe, and the probes' data is enough
    for the body to decide: with the learner's side in another process, the reference passes
    (on specimens the judge draws afresh)."""
    verdict = remote_verdict(check_id, *(f"{REFERENCE}:{name}" for name in answers))
    assert verdict["status"] == "passed", verdict["message"]


@pytest.mark.parametrize(
    "check, check_id, answers",
    [
        (lesson.check_lr_range_test, "01-lr-range", ("range_linear", "steepest")),
        (lesson.check_one_cycle, "01-one-cycle", ("cycle_per_epoch",)),
        (lesson.check_adamw, "01-adamw", ("opt_adam_l2",)),
    ],
    ids=["linear-sweep", "stepped-per-epoch", "adam-l2"],
)
def test_judged_remotely_a_wrong_answer_fails_as_in_a_notebook(
    red_team, fast_sweep, check, check_id, answers
):
    """A red-team wrong answer gets the same verdict from the judge as in a notebook (the fast
    sweep reaches the child: the body sends the sweep to the probe)."""
    here = status_of(check, *(getattr(red_team, name) for name in answers))
    there = remote_verdict(check_id, *(f"test_01_one_cycle:{name}" for name in answers))
    assert here == there["status"] == "failed", there["message"]
