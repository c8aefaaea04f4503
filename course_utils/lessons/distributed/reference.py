"""Reference answers of lesson 06, and the single-process training a DDP run must equal.

Verified on torch 2.14 (CPU, gloo, 2 processes): the notebook's DDP script's final parameters
match `replay` to 3.4e-08; `reference_accumulate` issues one all-reduce per bucket per optimizer
step and leaves the full-batch mean gradient on every rank.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from ...checks import reference
from ...errors import ReferenceUsed
from . import workload
from .launch import LEARNER_ENV


def refused_in_learner_runs(fn: Callable) -> Callable:
    """`@reference` across processes: a check's torchrun launch sets LEARNER_ENV, and then
    the learner's script may not call the lesson's answer."""

    @functools.wraps(fn)
    def guarded(*args, **kwargs):
        if os.environ.get(LEARNER_ENV):
            raise ReferenceUsed(fn.__name__)
        return fn(*args, **kwargs)

    return guarded


@reference
@refused_in_learner_runs
def reference_accumulate(model: nn.Module, micro_batches: Sequence[tuple]) -> None:
    """Exercise 2: gradient accumulation that all-reduces once per optimizer step.

    DDP decides whether to synchronise when the FORWARD runs, so the forward of every
    micro-batch but the last runs inside `no_sync()`. Each loss is divided by the number of
    micro-batches, so the accumulated gradient is the mean over the whole batch.
    """
    k = len(micro_batches)
    for i, (x, y) in enumerate(micro_batches):
        last = i == k - 1
        with contextlib.nullcontext() if last else model.no_sync():
            (F.cross_entropy(model(x), y) / k).backward()


def replay(
    global_batches: Sequence[Sequence[int]],
    cfg: workload.Config,
    *,
    grad_scale: float = 1.0,
) -> list[dict[str, torch.Tensor]]:
    """Train the lesson's model in ONE process on the given global batches (sample indices,
    one list per optimizer step); return the parameters after every step (index 0: initial).

    `grad_scale` replays a mistake: 2.0 is what summing two ranks' gradients gives.
    """
    x, y = make_tensors()
    model = workload.make_model()
    optimizer = workload.make_optimizer(model.parameters(), cfg.lr)
    states = [_params(model)]
    for batch in global_batches:
        idx = torch.tensor(batch)
        loss = F.cross_entropy(model(x[idx]), y[idx]) * grad_scale
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        states.append(_params(model))
    return states


@functools.cache
def make_tensors() -> tuple[torch.Tensor, torch.Tensor]:
    """The lesson's data set as two tensors (made once per process)."""
    return tuple(workload.make_dataset().tensors)


def _params(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.state_dict().items()}
