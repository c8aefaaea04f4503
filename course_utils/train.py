"""The reference training loop: the plain baseline that the lessons make faster.

One loop, read top to bottom, with the switches the lessons add (AMP, accumulation,
clipping, channels_last, a per-batch scheduler). It records a History of what happened.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

import torch
from torch import nn

from .device import amp_dtype, autocast, env_info, get_device, synchronize
from .progress import tqdm


@dataclass
class History:
    """What a training run did: per step loss, lr and wall time; per evaluation accuracy."""

    step: list[int] = field(default_factory=list)
    loss: list[float] = field(default_factory=list)
    lr: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)  # wall time since the start, per step
    eval_step: list[int] = field(default_factory=list)
    accuracy: list[float] = field(default_factory=list)
    env: dict = field(default_factory=dict)

    def steps_to(self, accuracy: float) -> int | None:
        """First evaluated step at which accuracy reached `accuracy`, or None."""
        return next(
            (s for s, a in zip(self.eval_step, self.accuracy, strict=True) if a >= accuracy), None
        )

    @property
    def final_accuracy(self) -> float | None:
        return self.accuracy[-1] if self.accuracy else None

    def to_dict(self) -> dict:
        return asdict(self)


@torch.no_grad()
def evaluate(model: nn.Module, loader: Iterable, device: torch.device | str | None = None) -> float:
    """Top-1 accuracy over `loader`, in eval mode, without autograd."""
    device = torch.device(device) if device is not None else get_device()
    was_training = model.training
    model.eval()
    correct = total = 0
    for x, y in loader:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        correct += (model(x).argmax(1) == y).sum().item()
        total += y.numel()
    model.train(was_training)
    return correct / max(total, 1)


def _cycle(loader: Iterable):
    while True:
        yield from loader


def _step(scaler: torch.amp.GradScaler, optimizer: torch.optim.Optimizer) -> bool:
    """Step through the scaler; False when it skipped the step (inf/NaN gradients in fp16).

    A schedule must not advance on a skipped step. The scaler already reads its inf check
    back to the host to decide (one sync per step, inherent to fp16 with a GradScaler); a
    step post-hook hears whether the optimizer ran, so no further read is needed: comparing
    `get_scale()` before and after would add two host-device syncs per step.
    """
    if not scaler.is_enabled():
        scaler.step(optimizer)
        return True
    stepped = False

    def ran(*_) -> None:
        nonlocal stepped
        stepped = True

    hook = optimizer.register_step_post_hook(ran)
    try:
        scaler.step(optimizer)
    finally:
        hook.remove()
    scaler.update()
    return stepped


def needs_grad_scaler(device: torch.device, amp: bool) -> bool:
    """fp16 autocast on CUDA (T4, V100): small gradients underflow without loss scaling.
    bf16 keeps fp32's exponent range, so it needs none."""
    return amp and device.type == "cuda" and amp_dtype(device) == torch.float16


def train(
    model: nn.Module,
    loader: Iterable,
    optimizer: torch.optim.Optimizer,
    *,
    steps: int | None = None,
    epochs: int | None = None,
    scheduler=None,
    loss_fn=None,
    amp: bool = False,
    accumulate: int = 1,
    clip: float | None = None,
    channels_last: bool = False,
    eval_loader: Iterable | None = None,
    eval_every: int | None = None,
    device: torch.device | str | None = None,
    progress: bool = True,
) -> History:
    """Train for `steps` optimizer steps (or `epochs` passes over `loader`); return the History.

    `scheduler` is stepped once per optimizer step (one-cycle and warm-up schedules are
    per-batch schedules). With `accumulate` > 1 each step sees that many micro-batches, and
    the loss is divided so the gradient equals the full-batch mean.
    """
    if (steps is None) == (epochs is None):
        raise ValueError("give either steps or epochs")
    steps = steps if steps is not None else epochs * (len(loader) // accumulate)
    device = torch.device(device) if device is not None else get_device()
    loss_fn = loss_fn or nn.CrossEntropyLoss()
    memory_format = torch.channels_last if channels_last else torch.contiguous_format
    model.to(device, memory_format=memory_format).train()
    scaler = torch.amp.GradScaler(device.type, enabled=needs_grad_scaler(device, amp))
    history, batches = History(env=env_info(device)), _cycle(loader)
    losses = []  # device tensors: read once at the end, not one host-device sync per step
    start = time.perf_counter()
    bar = tqdm(range(1, steps + 1), desc="training", disable=not progress, leave=False)
    for step in bar:
        total = torch.zeros((), device=device)
        for _ in range(accumulate):
            x, y = next(batches)
            x = x.to(device, non_blocking=True, memory_format=memory_format)
            y = y.to(device, non_blocking=True)
            with autocast(device, enabled=amp):
                loss = loss_fn(model(x), y) / accumulate
            scaler.scale(loss).backward()
            total += loss.detach()
        if clip is not None:
            scaler.unscale_(optimizer)  # clip the true gradients, not the scaled ones
            nn.utils.clip_grad_norm_(model.parameters(), clip)
        stepped = _step(scaler, optimizer)  # also updates the scale
        optimizer.zero_grad(set_to_none=True)
        if scheduler is not None and stepped:
            scheduler.step()
        losses.append(total)
        history.step.append(step)
        history.lr.append(optimizer.param_groups[0]["lr"])
        history.seconds.append(time.perf_counter() - start)  # host time: work may be queued
        if eval_loader is not None and eval_every and (step % eval_every == 0 or step == steps):
            history.eval_step.append(step)
            history.accuracy.append(evaluate(model, eval_loader, device))  # syncs anyway
            history.seconds[-1] = time.perf_counter() - start
            bar.set_postfix(loss=f"{float(total):.3f}", acc=f"{history.accuracy[-1]:.1%}")
    history.loss = torch.stack(losses).float().tolist() if losses else []
    synchronize(device)
    return history
