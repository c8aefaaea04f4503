"""Red team, notebook 01 (one_cycle): wrong and valid answers written from the notebook alone."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from redteam_helpers import assert_verdict, in_ci, run_check
from torch import nn
from torch.optim.lr_scheduler import ExponentialLR, OneCycleLR

from course_utils.lessons import one_cycle as lesson

# --- 01-lr-range: lr_range_test(...) -> (lrs, smoothed losses); suggest_lr(lrs, losses) ------


def _sweep(
    model,
    optimizer,
    batches,
    loss_fn,
    *,
    start_lr,
    end_lr,
    num_steps,
    beta,
    blowup,
    lr_at=None,
    set_lr=None,
    smooth="corrected",
    stop="smoothed",
    record_stop=True,
):
    """The range test with one switch per mistake (the defaults are a correct test)."""
    gamma = (end_lr / start_lr) ** (1 / (num_steps - 1))
    lr_at = lr_at or (lambda i: start_lr * gamma**i)
    lrs, losses, avg, best, raw_best = [], [], 0.0, math.inf, math.inf
    model.train()
    for i in range(num_steps):
        lr = lr_at(i)
        if set_lr:
            set_lr(optimizer, lr)
        else:
            for group in optimizer.param_groups:
                group["lr"] = lr
        x, y = next(batches)
        loss = loss_fn(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        value = loss.item()
        if smooth == "first" and i == 0:
            avg = value
        else:
            avg = beta * avg + (1 - beta) * value
        smoothed = avg / (1 - beta ** (i + 1)) if smooth == "corrected" else avg
        best, raw_best = min(best, smoothed), min(raw_best, value)
        blew_up = not math.isfinite(smoothed) or smoothed > blowup * best
        if stop == "raw":
            blew_up = not math.isfinite(value) or value > blowup * raw_best
        if blew_up and not record_stop:
            break
        lrs.append(lr)
        losses.append(smoothed)
        if stop != "never" and blew_up:
            break
    return lrs, losses


def steepest(lrs, losses):
    losses = np.asarray(losses, dtype=float)
    stop = int(np.nanargmin(losses)) + 1
    if stop < 3:
        return float(lrs[0])
    slope = np.gradient(losses[:stop], np.log10(lrs[:stop]))
    return float(lrs[int(np.argmin(slope))])


def range_linear(model, optimizer, batches, loss_fn, **kw):
    n, a, b = kw["num_steps"], kw["start_lr"], kw["end_lr"]
    return _sweep(
        model, optimizer, batches, loss_fn, lr_at=lambda i: a + (b - a) * i / (n - 1), **kw
    )


def range_defaults(model, optimizer, batches, loss_fn, **kw):
    return _sweep(
        model, optimizer, batches, loss_fn, set_lr=lambda o, lr: o.defaults.update(lr=lr), **kw
    )


def range_first_group(model, optimizer, batches, loss_fn, **kw):
    def first_group(o, lr):
        o.param_groups[0]["lr"] = lr

    return _sweep(model, optimizer, batches, loss_fn, set_lr=first_group, **kw)


def range_no_bias_correction(model, optimizer, batches, loss_fn, **kw):
    return _sweep(model, optimizer, batches, loss_fn, smooth="none", **kw)


def range_never_stops(model, optimizer, batches, loss_fn, **kw):
    return _sweep(model, optimizer, batches, loss_fn, stop="never", **kw)


def range_stop_on_raw(model, optimizer, batches, loss_fn, **kw):
    return _sweep(model, optimizer, batches, loss_fn, stop="raw", **kw)


def range_gamma_off_by_one(model, optimizer, batches, loss_fn, **kw):
    gamma = (kw["end_lr"] / kw["start_lr"]) ** (1 / kw["num_steps"])  # ends one step short
    return _sweep(
        model, optimizer, batches, loss_fn, lr_at=lambda i: kw["start_lr"] * gamma**i, **kw
    )


def range_drops_stop_step(model, optimizer, batches, loss_fn, **kw):
    return _sweep(model, optimizer, batches, loss_fn, record_stop=False, **kw)


def range_scheduler_ema_first(
    model, optimizer, batches, loss_fn, *, start_lr, end_lr, num_steps, beta, blowup
):
    """Valid: ExponentialLR drives the sweep; the average starts at the first loss (no bias)."""
    for group in optimizer.param_groups:
        group["lr"] = start_lr
        group["initial_lr"] = start_lr
    scheduler = ExponentialLR(optimizer, gamma=(end_lr / start_lr) ** (1 / (num_steps - 1)))
    lrs, losses, avg = [], [], None
    for _ in range(num_steps):
        lr = optimizer.param_groups[0]["lr"]
        x, y = next(batches)
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        scheduler.step()
        avg = loss.item() if avg is None else beta * avg + (1 - beta) * loss.item()
        lrs.append(lr)
        losses.append(avg)
        if math.isnan(avg) or avg > blowup * min(losses):
            break
    return lrs, losses


def range_logspace(
    model, optimizer, batches, loss_fn, *, start_lr, end_lr, num_steps, beta, blowup
):
    """Valid: np.geomspace rates, bias-corrected average, a tenth of the minimum's rate."""
    rates = np.geomspace(start_lr, end_lr, num_steps)
    lrs, losses, avg = [], [], 0.0
    for i, lr in enumerate(rates):
        for group in optimizer.param_groups:
            group["lr"] = float(lr)
        x, y = next(batches)
        loss = loss_fn(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        avg = beta * avg + (1 - beta) * float(loss)
        smoothed = avg / (1 - beta ** (i + 1))
        lrs.append(float(lr))
        losses.append(smoothed)
        if not np.isfinite(smoothed) or smoothed > blowup * min(losses):
            break
    return lrs, losses


def tenth_of_minimum(lrs, losses):
    return float(lrs[int(np.nanargmin(losses))]) / 10


def at_minimum(lrs, losses):
    return float(lrs[int(np.nanargmin(losses))])


def last_rate(lrs, losses):
    return float(lrs[-1])


def first_rate(lrs, losses):
    return float(lrs[0])


def correct_range(model, optimizer, batches, loss_fn, **kw):
    return _sweep(model, optimizer, batches, loss_fn, **kw)


LR_RANGE = [
    pytest.param(
        range_linear,
        steepest,
        "failed",
        r"exponential|geometric|linear",
        (),
        id="wrong-linear-sweep",
    ),
    pytest.param(
        range_defaults,
        steepest,
        "failed",
        r"param_groups|applied|used",
        (),
        id="wrong-optimizer-defaults",
    ),
    pytest.param(
        range_first_group,
        steepest,
        "failed",
        r"group",
        (r"smooth",),
        id="wrong-first-param-group-only",
    ),
    pytest.param(
        range_no_bias_correction,
        steepest,
        "failed",
        r"bias|correct|start",
        (r"group",),
        id="wrong-no-bias-correction",
    ),
    pytest.param(
        range_never_stops,
        steepest,
        "failed",
        r"stop|blow",
        (r"group|exponential",),
        id="wrong-never-stops",
    ),
    pytest.param(
        range_stop_on_raw,
        steepest,
        "failed",
        r"stop|raw|smoothed",
        (r"group",),
        id="wrong-stops-on-raw-loss",
    ),
    pytest.param(
        range_gamma_off_by_one,
        steepest,
        "failed",
        r"end|last|gamma|num_steps",
        (),
        id="wrong-gamma-off-by-one",
    ),
    pytest.param(
        range_drops_stop_step,
        steepest,
        "failed",
        r"step|entr|record",
        (r"group",),
        id="wrong-drops-the-stopping-step",
    ),
    pytest.param(
        correct_range,
        at_minimum,
        "failed",
        r"minimum|edge|too (high|large)",
        (),
        id="wrong-suggests-the-minimum",
    ),
    pytest.param(
        correct_range,
        last_rate,
        "failed",
        r"diverg|too (high|large)|blow",
        (),
        id="wrong-suggests-the-last-rate",
    ),
    pytest.param(
        correct_range,
        first_rate,
        "failed",
        r"too (low|small)|flat|crawl|plateau",
        (),
        id="wrong-suggests-the-first-rate",
    ),
    pytest.param(
        range_scheduler_ema_first,
        steepest,
        "passed",
        None,
        (),
        id="valid-scheduler-ema-from-first-loss",
    ),
    pytest.param(
        range_logspace, tenth_of_minimum, "passed", None, (), id="valid-geomspace-tenth-of-minimum"
    ),
]
# A range test that passes makes the check train the model at several rates (25-50 s under
# load): CI runs one that fails early; tests/test_lesson_01.py passes the solution through it.
LR_RANGE = in_ci(LR_RANGE, {"wrong-linear-sweep"})


@pytest.mark.parametrize("test_fn, suggest_fn, expected, cause, not_causes", LR_RANGE)
def test_lr_range(test_fn, suggest_fn, expected, cause, not_causes):
    verdict = run_check(lesson.check_lr_range_test, test_fn, suggest_fn)
    assert_verdict(verdict, expected, cause, not_causes)


# --- 01-one-cycle: fit_one_cycle(model, optimizer, loader, *, epochs, max_lr, loss_fn) ------


def _train(model, optimizer, loader, epochs, loss_fn, scheduler, *, per="batch", order="after"):
    for _ in range(epochs):
        for x, y in loader:
            loss = loss_fn(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            if order == "before":
                scheduler.step()
            optimizer.step()
            if per == "batch" and order == "after":
                scheduler.step()
        if per == "epoch":
            scheduler.step()
    return scheduler


def cycle_dataset_steps(model, optimizer, loader, *, epochs, max_lr, loss_fn):
    steps = len(loader.dataset) // loader.batch_size
    s = OneCycleLR(optimizer, max_lr=max_lr, epochs=epochs, steps_per_epoch=steps)
    return _train(model, optimizer, loader, epochs, loss_fn, s)


def cycle_per_epoch(model, optimizer, loader, *, epochs, max_lr, loss_fn):
    s = OneCycleLR(optimizer, max_lr=max_lr, epochs=epochs, steps_per_epoch=len(loader))
    return _train(model, optimizer, loader, epochs, loss_fn, s, per="epoch")


def cycle_div_factor_10(model, optimizer, loader, *, epochs, max_lr, loss_fn):
    s = OneCycleLR(optimizer, max_lr=max_lr, total_steps=epochs * len(loader), div_factor=10)
    return _train(model, optimizer, loader, epochs, loss_fn, s)


def cycle_one_extra_step(model, optimizer, loader, *, epochs, max_lr, loss_fn):
    s = OneCycleLR(optimizer, max_lr=max_lr, total_steps=epochs * len(loader) + 1)  # "to be safe"
    return _train(model, optimizer, loader, epochs, loss_fn, s)


def cycle_step_before_optimizer(model, optimizer, loader, *, epochs, max_lr, loss_fn):
    s = OneCycleLR(optimizer, max_lr=max_lr, epochs=epochs, steps_per_epoch=len(loader))
    return _train(model, optimizer, loader, epochs, loss_fn, s, order="before")


def cycle_no_momentum(model, optimizer, loader, *, epochs, max_lr, loss_fn):
    s = OneCycleLR(
        optimizer, max_lr=max_lr, epochs=epochs, steps_per_epoch=len(loader), cycle_momentum=False
    )
    return _train(model, optimizer, loader, epochs, loss_fn, s)


def cycle_per_epoch_cycles(model, optimizer, loader, *, epochs, max_lr, loss_fn):
    s = None
    for _ in range(epochs):  # a fresh cycle every epoch
        s = OneCycleLR(optimizer, max_lr=max_lr, epochs=1, steps_per_epoch=len(loader))
        _train(model, optimizer, loader, 1, loss_fn, s)
    return s


def cycle_three_phase(model, optimizer, loader, *, epochs, max_lr, loss_fn):
    s = OneCycleLR(optimizer, max_lr=max_lr, total_steps=epochs * len(loader), three_phase=True)
    return _train(model, optimizer, loader, epochs, loss_fn, s)


def cycle_returns_nothing(model, optimizer, loader, *, epochs, max_lr, loss_fn):
    s = OneCycleLR(optimizer, max_lr=max_lr, epochs=epochs, steps_per_epoch=len(loader))
    _train(model, optimizer, loader, epochs, loss_fn, s)


def cycle_total_steps_explicit(model, optimizer, loader, *, epochs, max_lr, loss_fn):
    """Valid: total_steps and every default spelled out."""
    s = OneCycleLR(
        optimizer,
        max_lr=max_lr,
        total_steps=epochs * len(loader),
        pct_start=0.3,
        anneal_strategy="cos",
        div_factor=25.0,
        final_div_factor=1e4,
    )
    model.train()
    for _ in range(epochs):
        for x, y in loader:
            optimizer.zero_grad(set_to_none=True)
            loss_fn(model(x), y).backward()
            optimizer.step()
            s.step()
    return s


def cycle_ceil_batches(model, optimizer, loader, *, epochs, max_lr, loss_fn):
    """Valid: the batch count worked out as a ceiling division (no drop_last here)."""
    per_epoch = math.ceil(len(loader.dataset) / loader.batch_size)
    s = OneCycleLR(optimizer, max_lr=max_lr, epochs=epochs, steps_per_epoch=per_epoch)
    step = 0
    while step < epochs * per_epoch:
        for x, y in loader:
            loss = loss_fn(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            s.step()
            step += 1
    return s


def cycle_skips_last_scheduler_step(model, optimizer, loader, *, epochs, max_lr, loss_fn):
    """Valid (issue 26): no scheduler.step() after the last optimizer step. Every optimizer
    step used OneCycleLR's lr; the skipped call would only set an lr no step uses."""
    total = epochs * len(loader)
    s = OneCycleLR(optimizer, max_lr=max_lr, total_steps=total)
    done = 0
    for _ in range(epochs):
        for x, y in loader:
            loss = loss_fn(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            done += 1
            if done < total:
                s.step()
    return s


ONE_CYCLE = [
    pytest.param(
        cycle_dataset_steps,
        "failed",
        r"len\(loader\)|partial|last batch|steps",
        (),
        id="wrong-steps-from-dataset-size",
    ),
    pytest.param(
        cycle_per_epoch,
        "failed",
        r"every batch|per batch|once per epoch",
        (r"div",),
        id="wrong-stepped-per-epoch",
    ),
    pytest.param(
        cycle_div_factor_10,
        "failed",
        r"div_factor|25|start",
        (r"per epoch",),
        id="wrong-div-factor-10",
    ),
    pytest.param(
        cycle_one_extra_step,
        "failed",
        r"total|steps|end",
        (r"div_factor",),
        id="wrong-total-steps-plus-one",
    ),
    pytest.param(
        cycle_step_before_optimizer,
        "failed",
        r"before|order|after",
        (r"div_factor",),
        id="wrong-scheduler-before-optimizer",
    ),
    pytest.param(
        cycle_no_momentum,
        "failed",
        r"momentum|beta",
        (r"div_factor",),
        id="wrong-cycle-momentum-off",
    ),
    pytest.param(
        cycle_per_epoch_cycles,
        "failed",
        None,
        (),
        id="wrong-a-cycle-per-epoch",
    ),
    pytest.param(cycle_three_phase, "failed", r"three|default|phase", (), id="wrong-three-phase"),
    pytest.param(cycle_returns_nothing, "failed", r"return", (), id="wrong-returns-none"),
    pytest.param(cycle_total_steps_explicit, "passed", None, (), id="valid-total-steps-explicit"),
    pytest.param(cycle_ceil_batches, "passed", None, (), id="valid-ceil-batch-count"),
    pytest.param(
        cycle_skips_last_scheduler_step, "passed", None, (), id="valid-skips-last-scheduler-step"
    ),
]
ONE_CYCLE = in_ci(
    ONE_CYCLE,
    {
        "valid-ceil-batch-count",
        "valid-skips-last-scheduler-step",
        "wrong-returns-none",
        "wrong-stepped-per-epoch",
    },
)


@pytest.mark.parametrize("fn, expected, cause, not_causes", ONE_CYCLE)
def test_one_cycle(fn, expected, cause, not_causes):
    assert_verdict(run_check(lesson.check_one_cycle, fn), expected, cause, not_causes)


# --- 01-adamw: configure_optimizer(model, lr, weight_decay) -> optimizer -----------------


def _split(model):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    return decay, rest


def opt_adam_l2(model, lr, weight_decay):
    decay, rest = _split(model)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0}]
    return torch.optim.Adam(groups, lr=lr)


def opt_decay_everything(model, lr, weight_decay):
    return torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)


def opt_by_name_bias(model, lr, weight_decay):
    named = list(model.named_parameters())
    decay = [p for n, p in named if not n.endswith("bias")]  # BatchNorm's weight decays
    rest = [p for n, p in named if n.endswith("bias")]
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0}]
    return torch.optim.AdamW(groups, lr=lr)


def opt_linear_only(model, lr, weight_decay):
    decay = [p for p in model.parameters() if p.dim() == 2]  # conv kernels are 4-D
    rest = [p for p in model.parameters() if p.dim() != 2]
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0}]
    return torch.optim.AdamW(groups, lr=lr)


def opt_lr_in_first_group(model, lr, weight_decay):
    decay, rest = _split(model)
    return torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": weight_decay, "lr": lr},
            {"params": rest, "weight_decay": 0.0},
        ]
    )


def opt_default_decay(model, lr, weight_decay):
    decay, rest = _split(model)
    return torch.optim.AdamW([{"params": decay}, {"params": rest, "weight_decay": 0.0}], lr=lr)


def opt_forgets_the_rest(model, lr, weight_decay):
    decay, _ = _split(model)
    return torch.optim.AdamW(decay, lr=lr, weight_decay=weight_decay)


def opt_by_module_type(model, lr, weight_decay):
    """Valid: decay the weights of conv and linear modules; everything else none."""
    decay_ids = {id(m.weight) for m in model.modules() if isinstance(m, (nn.Conv2d, nn.Linear))}
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if id(p) in decay_ids]},
        {"params": [p for p in params if id(p) not in decay_ids], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=lr, weight_decay=weight_decay, foreach=False)


def opt_adam_decoupled(model, lr, weight_decay):
    """Valid: Adam with decoupled_weight_decay=True is AdamW under another name."""
    decay, rest = _split(model)
    groups = [{"params": decay, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0}]
    return torch.optim.Adam(groups, lr=lr, decoupled_weight_decay=True)


ADAMW = [
    pytest.param(
        opt_adam_l2,
        "failed",
        r"L2|Adam\b|decoupl|gradient",
        (r"\bbiases\b|BatchNorm",),
        id="wrong-adam-l2",
    ),
    pytest.param(
        opt_decay_everything, "failed", r"bias|norm", (r"decoupl|L2",), id="wrong-decays-everything"
    ),
    pytest.param(
        opt_by_name_bias,
        "failed",
        r"norm|BatchNorm|scale",
        (r"L2",),
        id="wrong-batchnorm-scale-decayed",
    ),
    pytest.param(
        opt_linear_only,
        "failed",
        r"conv|net\.0\.0\.weight|decayed by 0",
        (r"L2",),
        id="wrong-conv-not-decayed",
    ),
    pytest.param(
        opt_lr_in_first_group,
        "failed",
        r"lr|learning rate",
        (r"L2|Adam's weight_decay",),
        id="wrong-lr-only-in-first-group",
    ),
    pytest.param(
        opt_default_decay,
        "failed",
        r"weight_decay|0\.01|amount|rate",
        (r"L2",),
        id="wrong-default-weight-decay",
    ),
    pytest.param(
        opt_forgets_the_rest,
        "failed",
        r"not (in|trained|updated)|missing|every",
        (),
        id="wrong-biases-left-out",
    ),
    pytest.param(opt_by_module_type, "passed", None, (), id="valid-by-module-type"),
    pytest.param(opt_adam_decoupled, "passed", None, (), id="valid-adam-decoupled"),
]


@pytest.mark.parametrize("fn, expected, cause, not_causes", ADAMW)
def test_adamw(fn, expected, cause, not_causes):
    assert_verdict(run_check(lesson.check_adamw, fn), expected, cause, not_causes)
