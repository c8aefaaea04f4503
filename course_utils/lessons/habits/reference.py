"""Lesson 10's reference answers. Verified by tests/test_lesson_10.py on torch 2.14 (CPU,
cpu-bf16 class), where each passes its check; the APIs they use exist since torch 2.0
(`foreach` optimizers since 1.12, `inference_mode` since 1.9)."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ...checks import reference
from .loop import LR, NumpyData, TrainLog, fastest_adamw


@reference
def reference_fast_train(
    model: nn.Module, data: NumpyData, steps: int, device, eval_every: int = 10, lr: float = LR
) -> TrainLog:
    """slow_train without its habits: same batches, same AdamW, same records.

    Data converted once without a copy and moved once; the weight tensor built on the device;
    a fused AdamW (one kernel for the whole update; foreach where fused is missing); no debug
    modes; losses kept on the
    device and read back in one sync at the end; validation without autograd.
    """
    model.to(device).train()
    x_all, y_all = torch.from_numpy(data.x).to(device), torch.from_numpy(data.y).to(device)
    x_val, y_val = torch.from_numpy(data.x_val).to(device), torch.from_numpy(data.y_val).to(device)
    weight = torch.tensor(data.class_weights, device=device)
    optimizer = fastest_adamw(model.parameters(), lr)
    batch, n_batches = data.batch_size, len(data.x) // data.batch_size
    losses, accuracies = [], []
    for step in range(steps):
        i = (step % n_batches) * batch
        loss = F.cross_entropy(model(x_all[i : i + batch]), y_all[i : i + batch], weight=weight)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.detach())
        if (step + 1) % eval_every == 0:
            model.eval()
            with torch.inference_mode():
                accuracies.append((model(x_val).argmax(1) == y_val).float().mean())
            model.train()
    read = lambda xs: torch.stack(xs).tolist() if xs else []  # noqa: E731  (one sync each)
    return TrainLog(read(losses), read(accuracies))


@reference
def reference_to_tensor(data, dtype: torch.dtype | None = None) -> torch.Tensor:
    """A CPU tensor over the data's own memory whenever torch can wrap it, else the one copy
    that is needed. torch has no negative strides, counts strides in whole elements (a field
    of a packed record array has neither) and reads only the machine's byte order
    (`torch.from_numpy` raises for all three), so such an array is copied once, into native
    order; `as_tensor` then shares, or copies only for a dtype change or a list."""
    if isinstance(data, np.ndarray) and (
        not data.dtype.isnative or any(s < 0 or s % data.itemsize for s in data.strides)
    ):
        data = np.ascontiguousarray(data, dtype=data.dtype.newbyteorder("="))
    return torch.as_tensor(data, dtype=dtype)


@reference
def reference_evaluate(model: nn.Module, x: torch.Tensor, y: torch.Tensor, batch_size: int = 256):
    """Top-1 accuracy in eval mode, without autograd, leaving the model's mode as it was."""
    was_training = model.training
    model.eval()
    try:
        with torch.inference_mode():
            hits = sum(
                (model(x[i : i + batch_size]).argmax(1) == y[i : i + batch_size]).sum()
                for i in range(0, len(x), batch_size)
            )
        return hits.item() / len(x)
    finally:
        model.train(was_training)
