"""What lesson 01's checks measure and how they read it: the sweep a range test really
applied, its smoothing, the schedule an optimizer really followed, and the first step of an
optimizer decoded into "decayed how much, and how". The checks in checks.py turn these into
graded parts.

Two sides share this module. `run_range_test`, `record_fit` and `first_step` run the learner's
code on a specimen built from plain arguments (in the learner's kernel, called by the probes of
probes.py); the rest reads what came back, as data, and computes what it must equal (in the
judge, under `course grade`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np
import torch
from torch import nn
from torch.optim.lr_scheduler import LRScheduler, OneCycleLR
from torch.utils.data import DataLoader, TensorDataset

from ...session import seed_everything
from .demo import LossRecorder, StepRecorder, adamw_two_groups, batch_stream, decoded, fresh_model

RANGE_SWEEP = dict(start_lr=1e-6, end_lr=100.0, num_steps=100, beta=0.9, blowup=4.0)
CHECK_TRAIN_IMAGES, CHECK_TEST_IMAGES = 4000, 1000  # the notebook's quick sizes: one decode
RANGE_WIDTH = 16

# --- the range test ----------------------------------------------------------------------------


@dataclass
class Steps:
    """What a StepRecorder saw, as plain data: at each optimizer step, group 0's lr, every
    group's lr, the momentum (or beta1) and the last raw loss. The judge's copy of it."""

    lr: list[float] = field(default_factory=list)
    group_lrs: list[tuple[float, ...]] = field(default_factory=list)
    momentum: list[float] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)

    @classmethod
    def of(cls, recorder) -> Steps:
        """From a StepRecorder, or from data with its four lists (attributes or keys)."""

        def read(name: str) -> list:
            return recorder[name] if isinstance(recorder, dict) else getattr(recorder, name)

        return cls(
            [float(v) for v in read("lr")],
            [tuple(float(v) for v in row) for row in read("group_lrs")],
            [float(v) for v in read("momentum")],
            [float(v) for v in read("loss")],
        )

    def to_data(self) -> dict:
        return asdict(self)


def fmt_list(xs, k: int = 3) -> str:
    head = ", ".join(f"{x:.3g}" for x in xs[:k])
    return f"[{head}{', ...' if len(xs) > k else ''}] ({len(xs)} values)"


def geometric(lrs: list[float], start: float, end: float, n: int) -> tuple[bool, str]:
    """Is `lrs` the exponential sweep from `start` to `end` in n rates (n - 1 ratios), the
    notebook's `gamma = (end / start) ** (1 / (n - 1))`? The ratio is compared to 1e-4: the
    off-by-one `1 / n` is 0.18% smaller here (1.2023 against 1.2045)."""
    if len(lrs) < 3:
        return False, f"the sweep returned only {len(lrs)} learning rates"
    arr = np.asarray(lrs, dtype=float)
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        return False, "the learning rates must be positive numbers"
    ratios = arr[1:] / arr[:-1]
    short, gamma = (end / start) ** (1 / n), (end / start) ** (1 / (n - 1))
    if not math.isclose(arr[0], start, rel_tol=1e-3):
        return False, f"the sweep starts at {arr[0]:.3g}, not at start_lr={start:.3g}"
    if np.all(np.abs(np.diff(arr) - (arr[1] - arr[0])) <= 1e-6 * arr.max()):
        return False, (
            "the learning rate grows by a constant amount each step (a linear sweep spends "
            "almost every step at the largest rates): multiply it by a constant factor instead"
        )
    if np.allclose(ratios, short, rtol=1e-4):
        return False, (
            f"each rate is {short:.5g}x the one before, (end_lr / start_lr) ** (1 / num_steps): "
            f"the last of {n} rates falls one step short of end_lr={end:g}; {n} rates have "
            f"{n - 1} ratios between them, gamma = (end_lr / start_lr) ** (1 / (num_steps - 1)) "
            f"= {gamma:.5g}"
        )
    if not np.allclose(ratios, gamma, rtol=1e-4):
        return False, (
            f"step-to-step ratios range {ratios.min():.5g}..{ratios.max():.5g}; an exponential "
            f"sweep from {start:g} to {end:g} in {n} rates multiplies the lr by {gamma:.5g}"
        )
    return True, f"{len(arr)} learning rates, each {ratios.mean():.5g}x the one before"


def applied(rec, lrs: list[float]) -> tuple[bool, str]:
    """Did every param group step with the returned lrs, one per optimizer step?"""
    steps, groups = len(rec.lr), len(rec.group_lrs[0]) if rec.group_lrs else 0
    if steps != len(lrs):
        return False, (
            f"the optimizer stepped {steps} times, you returned {len(lrs)} lrs: return one per "
            "optimizer step taken, the step that blew up included"
        )
    for g in range(groups):
        used = [r[g] for r in rec.group_lrs]
        if not np.allclose(used, lrs):
            if g == 0:
                return False, (
                    f"the optimizer stepped {steps} times with lrs {fmt_list(used)}, you "
                    f"returned {fmt_list(lrs)}: set group['lr'] in every "
                    "optimizer.param_groups before optimizer.step() (optimizer.defaults is "
                    "only read when a group is added)"
                )
            return False, (
                f"param group {g} of {groups} stepped with lrs {fmt_list(used)}, group 0 with "
                f"yours: set group['lr'] in every group of optimizer.param_groups"
            )
    return True, f"the optimizer stepped {steps} times, all {groups} param groups with your lrs"


def stop(rec, losses: list[float], n: int, blowup: float, end: float) -> tuple[bool, str]:
    """Did the test stop at the first step whose *returned* smoothed loss is not finite or
    above `blowup` x its minimum so far (the notebook's rule), and not before or after?"""
    best, blew = math.inf, None
    for i, value in enumerate(losses):
        best = min(best, value) if math.isfinite(value) else best
        if not math.isfinite(value) or value > blowup * best:
            blew = i
            break
    taken, raw = len(rec.lr), rec.loss
    if blew is not None and blew == len(losses) - 1:
        return True, f"stopped after {taken} of {n} steps, at lr {rec.lr[-1]:.3g}"
    if taken >= n:
        return False, (
            f"ran all {n} steps up to lr {end:g} (raw loss reached "
            f"{max(raw, default=math.nan):.3g}): break once the smoothed loss is not finite or "
            "above blowup x its minimum"
        )
    if blew is not None:
        return False, (
            f"your smoothed loss blew up at step {blew} (above {blowup:g}x its minimum, or not "
            f"finite), yet the test went on to step {len(losses) - 1}: break right after it"
        )
    last = losses[-1] / best if losses and best > 0 else math.nan
    raw_blew = bool(raw) and (not math.isfinite(raw[-1]) or raw[-1] > blowup * min(raw))
    said = (
        f"stopped after {taken} of {n} steps, where the last smoothed loss you returned is "
        f"{last:.3g}x its minimum, under blowup={blowup:g}"
    )
    if raw_blew and len(losses) == taken:
        return False, f"{said}; the raw loss of that step blew up: stop on the smoothed curve"
    if len(losses) < taken:
        return False, f"{said}: the step that blew up was taken but not returned"
    return False, f"{said}: stop after the step whose smoothed loss blows up, not before"


def smoothing(
    raw: list[float], smoothed: list[float], beta: float, limit: float
) -> tuple[bool, str]:
    """Judge the returned losses against the raw loss of each optimizer step."""
    if not raw:
        return False, "loss_fn was never called: compute the loss with the loss_fn passed in"
    if abs(len(smoothed) - len(raw)) > 1 or len(smoothed) < 3:
        return False, f"got {len(smoothed)} losses for {len(raw)} optimizer steps: one per step"
    k = min(len(raw), len(smoothed))
    raw_a, sm = np.asarray(raw[:k], dtype=float), np.asarray(smoothed[:k], dtype=float)
    if not math.isclose(sm[0], raw_a[0], rel_tol=0.25):
        if math.isclose(sm[0], (1 - beta) * raw_a[0], rel_tol=0.3):
            why = (
                "a moving average started at 0 gives (1 - beta) x the loss at first: divide "
                "by 1 - beta**t (bias correction) or start the average at the first loss"
            )
        else:
            why = "the smoothed curve must start where the loss starts"
        return (
            False,
            f"the first smoothed loss is {sm[0]:.3g}, the first loss {raw_a[0]:.3g}: {why}",
        )
    finite = np.isfinite(sm) & np.isfinite(raw_a)
    finite[-1] = False  # the point that blew up may be anything
    tv_raw = np.abs(np.diff(raw_a[finite])).sum()
    tv_sm = np.abs(np.diff(sm[finite])).sum()
    if tv_raw > 0 and tv_sm > limit * tv_raw:
        return False, (
            f"the returned losses zig-zag almost as much as the raw ones (total variation "
            f"{tv_sm:.3g} vs {tv_raw:.3g}): return an exponential moving average of the loss"
        )
    return True, f"smoothed: total variation {tv_sm:.3g} against {tv_raw:.3g} for the raw losses"


def run_range_test(
    lr_range_test: Callable, seed: int = 0, width: int | None = None, sweep: dict | None = None
):
    """Run a range test as the check does: (lrs, losses, StepRecorder with raw losses).
    `sweep`: the range test's keyword arguments (default RANGE_SWEEP)."""
    sweep = dict(sweep if sweep is not None else RANGE_SWEEP)
    x, y, _, _ = decoded("offline", CHECK_TRAIN_IMAGES, CHECK_TEST_IMAGES)
    model = fresh_model(width=width or RANGE_WIDTH, seed=seed)
    optimizer, loss_fn = adamw_two_groups(model, sweep["start_lr"]), LossRecorder()
    recorder = StepRecorder(optimizer, loss_fn.values)
    try:
        lrs, losses = lr_range_test(
            model, optimizer, batch_stream(x, y, seed=seed), loss_fn, **sweep
        )
    finally:
        recorder.remove()
    return [float(v) for v in lrs], [float(v) for v in losses], recorder


# --- the one-cycle schedule --------------------------------------------------------------------
ONE_CYCLE_CASES = (("SGD", 0.5), ("AdamW", 0.01))  # (optimizer, max_lr)
# 300 items in batches of 32: len(loader) = 10, but len(dataset) // 32 = 9 (a common mistake)
ONE_CYCLE_EPOCHS, ONE_CYCLE_ITEMS, ONE_CYCLE_BATCH = 3, 300, 32


def loader_batches(items: int) -> int:
    """len(loader) of `items` examples in batches of ONE_CYCLE_BATCH, the last one partial."""
    return math.ceil(items / ONE_CYCLE_BATCH)


def _optimizer(kind: str, params, lr: float) -> torch.optim.Optimizer:
    if kind == "SGD":
        return torch.optim.SGD(params, lr=lr, momentum=0.9)
    return torch.optim.AdamW(params, lr=lr)


def one_cycle_schedule(kind: str, max_lr: float, total: int) -> tuple[list[float], list[float]]:
    """lr and momentum/beta1 that OneCycleLR (defaults) gives at each of `total` steps."""
    optimizer = _optimizer(kind, [nn.Parameter(torch.zeros(1))], max_lr)
    scheduler = OneCycleLR(optimizer, max_lr=max_lr, total_steps=total)
    recorder = StepRecorder(optimizer)
    for _ in range(total):
        optimizer.step()
        scheduler.step()
    return recorder.lr, recorder.momentum


def schedule_diagnosis(lrs: np.ndarray, ref_lr: np.ndarray, max_lr: float) -> str:
    """Why a recorded lr schedule differs from OneCycleLR's defaults, from its shape."""
    start_ratio = max_lr / lrs[0] if lrs[0] > 0 else math.inf
    if np.allclose(lrs[:-1], ref_lr[1:], rtol=1e-6):
        return "it runs one step ahead: call scheduler.step() after optimizer.step(), not before"
    if not math.isclose(start_ratio, 25, rel_tol=1e-3):
        return f"it starts at max_lr/{start_ratio:.3g}; the default (div_factor=25) is max_lr/25"
    if not math.isclose(lrs.max(), max_lr, rel_tol=1e-3):
        return f"it peaks at {lrs.max():.3g}, never reaching max_lr={max_lr:g}: too many steps"
    if not math.isclose(lrs[-1], ref_lr[-1], rel_tol=1e-2):
        return f"it ends at {lrs[-1]:.3g}, not about {ref_lr[-1]:.3g}: it does not end with the run"
    return "its shape differs from OneCycleLR's defaults (pct_start=0.3, cosine annealing)"


def record_fit(fit_one_cycle: Callable, kind: str, max_lr: float, items: int = ONE_CYCLE_ITEMS):
    """Run the learner's loop on a small problem (`items` examples, seeded): what each
    optimizer step used (Steps, as data), the error message if the scheduler ran out of steps,
    and what the loop returned (scheduler_facts)."""
    seed_everything(0)
    dataset = TensorDataset(torch.randn(items, 20), torch.randint(0, 5, (items,)))
    loader = DataLoader(dataset, batch_size=ONE_CYCLE_BATCH, shuffle=True)
    model = nn.Linear(20, 5)
    optimizer = _optimizer(kind, model.parameters(), max_lr)
    recorder, ran_out, returned = StepRecorder(optimizer), "", None
    try:
        returned = fit_one_cycle(
            model,
            optimizer,
            loader,
            epochs=ONE_CYCLE_EPOCHS,
            max_lr=max_lr,
            loss_fn=nn.CrossEntropyLoss(),
        )
    except ValueError as exc:
        if "Tried to step" not in str(exc):
            raise
        ran_out = str(exc).strip()
    finally:
        recorder.remove()
    return {
        "steps": Steps.of(recorder).to_data(),
        "ran_out": ran_out,
        "returned": scheduler_facts(returned, optimizer),
    }


def scheduler_facts(returned, optimizer) -> dict:
    """What the judge needs to know of the value a loop returned, read beside it: its type,
    whether it is a scheduler driving `optimizer`, and how many times it was stepped."""
    facts = {"type": type(returned).__name__, "scheduler": isinstance(returned, LRScheduler)}
    if facts["scheduler"]:
        facts["drives_optimizer"] = returned.optimizer is optimizer
        facts["last_epoch"] = returned.last_epoch
    return facts


def returned_scheduler(facts: dict, steps: int) -> tuple[bool, str]:
    """Is the returned value (scheduler_facts) the scheduler that drove this optimizer, stepped
    once per optimizer step (`steps` of them)? (The notebook's loop returns it, for a caller to
    save or resume.) What matters is the lr each optimizer step used, which the schedule part
    checks: one missing scheduler.step() after the last optimizer step is harmless and passes."""
    if not facts["scheduler"]:
        return False, (
            f"fit_one_cycle returned {facts['type']}, not the scheduler: return it "
            "(the caller saves its state_dict() to resume)"
        )
    if not facts["drives_optimizer"]:
        return False, "the scheduler you returned drives another optimizer than the one passed in"
    last_epoch = facts["last_epoch"]
    if last_epoch == steps - 1:  # what each optimizer step used is judged apart
        return True, (
            f"returned the scheduler, stepped {steps - 1} times for {steps} optimizer steps: a "
            "scheduler.step() after the last optimizer step would set an lr no step uses, so "
            "leaving it out changes nothing"
        )
    if last_epoch != steps:
        return False, (
            f"the scheduler you returned was stepped {last_epoch} times, the "
            f"optimizer {steps} times: return the scheduler of the whole run"
        )
    return True, f"returned the scheduler, stepped {steps} times"


# --- the optimizer's first step, decoded -------------------------------------------------------


def known_gradients(model: nn.Module, seed: int = 0) -> dict[str, torch.Tensor]:
    """A gradient for each parameter, |g| in [0.01, 0.1] with random signs, drawn from `seed`
    in the order of named_parameters(): both sides draw the same ones."""
    gen = torch.Generator().manual_seed(seed)
    grads = {}
    for name, p in model.named_parameters():
        mag = 0.01 + 0.09 * torch.rand(p.shape, generator=gen)
        sign = torch.randint(0, 2, p.shape, generator=gen) * 2 - 1
        grads[name] = (mag * sign).to(p.dtype)
    return grads


def first_step(optimizer, model: nn.Module, seed: int = 0) -> dict[str, torch.Tensor]:
    """Step `optimizer` once with known_gradients(model, seed): every parameter after it."""
    for name, g in known_gradients(model, seed).items():
        model.get_parameter(name).grad = g.clone()
    optimizer.step()
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def first_step_kinds(
    model: nn.Module, after: dict, lr: float, weight_decay: float, seed: int = 0
) -> dict[str, tuple[str, float]]:
    """Explain each parameter's change in one step with known gradients (`after`: first_step's
    result, from the learner's optimizer; `model`: the same model before the step).

    Adam's first update is lr * g / (|g| + eps) whatever the betas, so each change is one of:
    'decoupled' (the weights also shrank by lr * wd: AdamW), 'none' (no decay), 'L2' (wd * p
    joined the gradient: Adam's weight_decay), or 'other' (not an Adam step at this lr).
    Returns {name: (kind, implied decay)}."""
    grads = known_gradients(model, seed)
    kinds = {}
    for name, p in model.named_parameters():
        p0, g = p.detach().double(), grads[name].double()
        p1 = after[name].double()
        adam = p0 - lr * g / (g.abs() + 1e-8)
        if torch.allclose(p1, adam, rtol=1e-5, atol=2e-6):
            kinds[name] = ("none", 0.0)
            continue
        implied = float(((adam - p1) * p0).sum() / (lr * (p0 * p0).sum()))
        if torch.allclose(p1, adam - lr * implied * p0, rtol=1e-5, atol=2e-6):
            kinds[name] = ("decoupled", implied)
            continue
        g_l2 = g + weight_decay * p0
        if torch.allclose(p1, p0 - lr * g_l2 / (g_l2.abs() + 1e-8), rtol=1e-5, atol=2e-6):
            kinds[name] = ("L2", weight_decay)
        else:
            kinds[name] = ("other", implied)
    return kinds
