"""Lesson 04's reference answers.

Verified with torch 2.14.1 on a cpu-bf16 machine (2-core Xeon with avx512_bf16), by
tests/test_lesson_04.py, and on CUDA by the same checks where a GPU was available.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ...checks import reference


@reference
def reference_rescued_grads(model: nn.Module, x: torch.Tensor, y: torch.Tensor):
    """Dynamic loss scaling by hand: start high, halve on inf/NaN, unscale in float32.

    fp16 holds magnitudes from 2**-24 to 65504. A scale moves the gradients up into that
    window; 2**16 is GradScaler's starting point, and a halving per overflow finds a scale
    that fits (Micikevicius et al. 2018, "Mixed Precision Training", section 3.2).
    """
    scale = 2.0**16
    while scale >= 1:
        model.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.float16):
            loss = F.mse_loss(model(x), y)
        (loss * scale).backward()
        grads = [p.grad.float() / scale for p in model.parameters()]  # unscale in fp32
        if all(torch.isfinite(g).all() for g in grads):
            return grads
        scale /= 2
    raise RuntimeError("no loss scale avoids overflow")


@reference
def reference_make_amp_step(model, loss_fn, optimizer, device, dtype, max_norm):
    """One AMP training step in the order the PyTorch AMP examples give: autocast only around
    the forward and the loss; scale -> backward -> unscale_ -> clip -> step -> update. A
    GradScaler only for float16 (bf16 has float32's range: nothing underflows)."""
    device = torch.device(device)
    scaler = torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)

    def step(x, y):
        with torch.autocast(device.type, dtype=dtype):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()  # outside autocast
        scaler.unscale_(optimizer)  # true gradients, so the clip threshold means what it says
        nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(optimizer)  # skipped if the gradients hold inf/NaN
        scaler.update()  # back off after an overflow, grow after 2000 clean steps
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    return step


@reference
def reference_stable_scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """softmax(q @ k.T) computed in float32 whatever the surrounding autocast: autocast off for
    this region, and the inputs cast to float32 (autocast's docs: inputs from the surrounding
    region should be cast before use in a disabled subregion)."""
    with torch.autocast(q.device.type, enabled=False):
        return (q.float() @ k.float().T).softmax(-1)
