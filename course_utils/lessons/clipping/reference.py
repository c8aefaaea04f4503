"""Reference answers for lesson 08, each checked against torch 2.14 on CPU (cpu-bf16 class).

`reference_total_norm` equals `clip_grad_norm_`'s return for norm types 1, 2, 3 and inf, with
`foreach` on or off; the steps equal `course_utils.train.train(clip=...)` parameter for parameter;
the accumulated step equals one clipped step on the whole batch (rtol 1e-4, k = 2, 4, 8).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

import torch
from torch import nn

from ...checks import reference


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
def reference_accumulated_clipped_step(
    model, loss_fn, micro_batches, optimizer, max_norm: float
) -> torch.Tensor:
    """One optimizer step over equal micro-batches, equal to one clipped step on all of them at
    once: each loss divided by their number (lesson 07), the gradient clipped once it is
    complete (after the last backward), then the step. Returns the norm before clipping, as a
    tensor (no `.item()`: that would wait for the device).

    PyTorch's AMP examples, "Gradient accumulation": the gradients are clipped "at the end",
    after all the micro-batches' backward passes
    (https://docs.pytorch.org/docs/stable/notes/amp_examples.html#gradient-accumulation).
    """
    optimizer.zero_grad(set_to_none=True)
    for x, y in micro_batches:
        (loss_fn(model(x), y) / len(micro_batches)).backward()  # adds into .grad
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)  # the gradient is complete
    optimizer.step()
    return norm
