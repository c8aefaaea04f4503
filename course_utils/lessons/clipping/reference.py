"""Reference answers for lesson 08, each checked against torch 2.14 on CPU (cpu-bf16 class).

`reference_total_norm` equals `clip_grad_norm_`'s return for norm types 1, 2, 3 and inf, with
`foreach` on or off; the steps equal `course_utils.train.train(clip=...)` parameter for parameter.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import nn

from ...checks import reference
from ...device import amp_dtype


@reference
def reference_total_norm(
    parameters: Iterable[torch.Tensor], norm_type: float = 2.0
) -> torch.Tensor:
    """The norm of the vector of all gradients: the norm of the per-tensor norms.

    Parameters without a gradient (frozen, or unused this step) contribute nothing.
    """
    grads = [p.grad for p in parameters if p.grad is not None]  # one pass: may be a generator
    if not grads:
        return torch.tensor(0.0)
    norms = torch.stack([torch.linalg.vector_norm(g.detach(), norm_type) for g in grads])
    return torch.linalg.vector_norm(norms, norm_type)


@reference
def reference_clipped_step(model, loss_fn, x, y, optimizer, max_norm: float) -> torch.Tensor:
    """One SGD step with the gradient clipped by its total 2-norm; returns the norm before."""
    optimizer.zero_grad(set_to_none=True)
    loss_fn(model(x), y).backward()
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)  # after backward, before step
    optimizer.step()
    return norm


@reference
def reference_choose_max_norm(norms: Iterable[float]) -> float:
    """The median of the finite norms seen: the bulk of the steps, blind to rare spikes.

    Pascanu et al. 2013 (arXiv:1211.5063, sec. 3.2): "look at statistics on the average norm
    over a sufficiently large number of updates ... half to ten times this value".
    """
    finite = sorted(float(n) for n in norms if math.isfinite(float(n)))
    return finite[len(finite) // 2]


@reference
def reference_amp_clipped_step(
    model, loss_fn, x, y, optimizer, scaler, max_norm: float
) -> torch.Tensor:
    """A mixed-precision step: clip the unscaled gradients, let the scaler skip inf steps.

    Returns the total norm as a tensor (no `.item()`: that would wait for the device).
    """
    optimizer.zero_grad(set_to_none=True)
    device_type = x.device.type
    with torch.autocast(device_type, dtype=amp_dtype(x.device)):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)  # the true gradients, so max_norm means what it says
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)  # skipped when the gradients hold inf or NaN
    scaler.update()
    return norm
