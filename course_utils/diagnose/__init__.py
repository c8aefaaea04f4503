"""`diagnose`: point the course at the learner's own training loop.

Runs a short window of their training, watched and timed, probes what each lesson's change
would be worth on copies, and returns a Diagnosis: findings ranked by measured or estimated
gain, each with its evidence, a one-line fix and the notebook that teaches it. The learner's
model, optimizer, RNG and torch flags are saved before and put back after (`SavedState`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
from torch import nn

from ..device import amp_dtype, autocast, device_class
from . import habits, probes, structure
from .context import Context
from .findings import Diagnosis, Finding, rank
from .run import run_window
from .state import SavedState

__all__ = ["Diagnosis", "Finding", "diagnose", "standard_step"]


def standard_step(
    model: nn.Module, optimizer: torch.optim.Optimizer, loss_fn, device, amp: bool = False
):
    """The plain loop body of the default form: forward, loss, backward, step, zero_grad
    (forward and loss under autocast in the device's fast dtype with `amp`, with a
    GradScaler where that dtype is fp16, as `course_utils.train` does)."""
    fp16 = amp and device.type == "cuda" and amp_dtype(device) == torch.float16
    scaler = torch.amp.GradScaler(device.type, enabled=fp16)
    params = [m.weight for m in model.modules() if isinstance(m, nn.Conv2d)]
    fmt = (
        torch.channels_last
        if params
        and params[0].is_contiguous(memory_format=torch.channels_last)
        and not params[0].is_contiguous()
        else torch.contiguous_format
    )

    def step(batch) -> None:
        x, y = batch[0], batch[1]
        x = x.to(device, non_blocking=True)
        if x.dim() == 4:
            x = x.contiguous(memory_format=fmt)
        y = y.to(device, non_blocking=True)
        with autocast(device, enabled=amp):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()

    return step


def diagnose(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    loader: Iterable,
    step: Callable | None = None,
    *,
    steps: int = 20,
    loss_fn: Callable | None = None,
    device: torch.device | str | None = None,
    restore: Iterable = (),
    amp: bool = False,
) -> Diagnosis:
    """Watch `steps` training steps and say which of the course's lessons pay here.

    Default form: each step is forward, `loss_fn` (cross-entropy), backward, optimizer step
    and zero_grad on a batch `(x, y)` from `loader` (`amp`: under autocast). Step form: `step(batch)` is the
    learner's own loop body (where their syncs and zero_grad habits live); it must use
    `model` and `optimizer`. Everything is put back afterwards: parameters, buffers, grads,
    modes, optimizer state, RNG, torch flags, and `restore` (objects with `state_dict()` /
    `load_state_dict()` that the step also changes: schedulers, GradScalers).
    """
    if steps < 6:
        raise ValueError("steps must be at least 6 (a few to warm up, the rest timed)")
    if device is None:
        device = next(model.parameters()).device
    device = torch.device(device)
    loss_fn = loss_fn or nn.CrossEntropyLoss()
    step = step or standard_step(model, optimizer, loss_fn, device, amp)
    saved = SavedState(model, optimizer, tuple(restore))
    # the window and the probes take seconds: say so at once, or the cell looks hung
    print(f"diagnose: watching {steps} steps of your loop, then probing what each lesson changes")
    try:
        window = run_window(step, loader, model, optimizer, steps, device)
        ctx = Context(
            model,
            optimizer,
            loader,
            device,
            device_class(device),
            window,
            torch.backends.cudnn.benchmark,
        )
        saved.restore()  # the probes start from the learner's state and flags,
        torch.autograd.set_detect_anomaly(False)  # but time without anomaly mode's cost
        _detect(ctx)
    finally:
        saved.restore()
    return Diagnosis(rank(ctx.findings), ctx.ok, ctx.not_checked, _window_dict(ctx))


def _detect(ctx: Context) -> None:
    habits.data_bound(ctx)
    habits.syncs(ctx)
    habits.grads_zeroed(ctx)
    habits.debug_switches(ctx, probes.anomaly_cost(ctx))
    habits.ddp_no_sync(ctx)
    habits.cudnn_shapes(ctx, probes.has_conv(ctx.base_model))
    structure.bias_before_bn(ctx)
    probes.low_precision(ctx)
    probes.conv_layout(ctx)
    probes.optimizer_impl(ctx)
    probes.batch_size(ctx)


def _window_dict(ctx: Context) -> dict:
    w = ctx.window
    return {
        "steps": w.steps,
        "step_ms": w.step_s * 1e3,
        "compute_ms": w.compute_s * 1e3,
        "wait_ms": w.wait_s * 1e3,
        "device": str(ctx.device),
        "device_class": ctx.device_class,
        "torch": torch.__version__,
    }
