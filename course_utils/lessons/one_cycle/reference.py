"""Lesson 01's reference answers: what the checks accept, and what demos use in learner
copies where an exercise is not written yet. Verified by tests/test_lesson_01.py against
the checks (range test on the offline images, OneCycleLR's own schedule, torch.optim)."""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import nn
from torch.optim.lr_scheduler import OneCycleLR

from ...checks import reference


@reference
def reference_lr_range_test(
    model,
    optimizer,
    batches,
    loss_fn,
    *,
    start_lr=1e-7,
    end_lr=10.0,
    num_steps=100,
    beta=0.9,
    blowup=4.0,
):
    """Exercise 1: an exponential sweep applied to every param group, a bias-corrected
    moving average of the loss, and a stop once it is not finite or above blowup x its best."""
    gamma = (end_lr / start_lr) ** (1 / (num_steps - 1))
    lrs, losses, avg, best = [], [], 0.0, math.inf
    model.train()
    for i in range(num_steps):
        lr = start_lr * gamma**i
        for group in optimizer.param_groups:
            group["lr"] = lr
        x, y = next(batches)
        loss = loss_fn(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        avg = beta * avg + (1 - beta) * loss.item()
        smoothed = avg / (1 - beta ** (i + 1))
        lrs.append(lr)
        losses.append(smoothed)
        best = min(best, smoothed)
        if not math.isfinite(smoothed) or smoothed > blowup * best:
            break
    return lrs, losses


@reference
def reference_suggest_lr(lrs, losses) -> float:
    """Exercise 1: the lr of steepest descent of the smoothed loss, before its minimum."""
    losses = np.asarray(losses, dtype=float)
    stop = int(np.nanargmin(losses)) + 1
    if stop < 3:
        return float(lrs[0])
    slope = np.gradient(losses[:stop], np.log10(lrs[:stop]))
    return float(lrs[int(np.argmin(slope))])


@reference
def reference_fit_one_cycle(model, optimizer, loader, *, epochs, max_lr, loss_fn):
    """Exercise 2: OneCycleLR with its defaults over epochs x len(loader) steps, stepped
    after every optimizer.step()."""
    scheduler = OneCycleLR(optimizer, max_lr=max_lr, epochs=epochs, steps_per_epoch=len(loader))
    model.train()
    for _ in range(epochs):
        for x, y in loader:
            loss = loss_fn(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            scheduler.step()
    return scheduler


@reference
def reference_configure_optimizer(model: nn.Module, lr: float, weight_decay: float):
    """Exercise 3: AdamW, decaying matrices and conv kernels (dim >= 2) and not biases or
    norm parameters (dim 1), as nanoGPT's configure_optimizers does."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=lr)
