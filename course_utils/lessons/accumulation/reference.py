"""Lesson 07's reference answers. Verified by tests/test_lesson_07.py on a cpu-bf16 machine
(torch 2.14, 2 cores): each passes its check, and the demos use them before the learner
has written their own."""

from __future__ import annotations

import torch
from torch import nn

from ...checks import reference


@reference
def reference_accumulate_epoch(model, optimizer, loader, loss_fn, accum_steps: int) -> None:
    """One epoch over `loader` (micro-batches), one optimizer step per `accum_steps` of them.

    Each micro-batch's mean loss is divided by the number of micro-batches in *its* group,
    so the accumulated gradient is the mean over the group (the micro-batches are of equal
    size); the last group may be shorter and is stepped, not dropped.
    """
    batches = list(loader)
    optimizer.zero_grad(set_to_none=True)
    for start in range(0, len(batches), accum_steps):
        group = batches[start : start + accum_steps]
        for x, y in group:
            loss = loss_fn(model(x), y) / len(group)
            loss.backward()  # adds into .grad: that is the accumulation
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


_FEWEST: dict[tuple, int] = {}  # (id of blocks, input shape, device) -> k, measured once


@reference
def reference_checkpointed_forward(blocks: nn.Sequential, x: torch.Tensor) -> torch.Tensor:
    """Checkpoint just enough for exercise 2's budget: the first k blocks one by one, k the
    fewest whose step peaks within THRESHOLDS["peak_ratio"] (measured once per stack and
    input shape: 12 of the check's 16 blocks on cpu-bf16). Each checkpointed block is run
    again in backward, so fewer checkpointed blocks cost less time; one block at a time keeps
    only its input. `use_reentrant=False` is passed explicitly (it gives gradients even when
    the input does not require grad); the RNG state is preserved by default, so dropout draws
    the same mask when it is recomputed."""
    from .checks import THRESHOLDS
    from .layouts import fewest_first_k, first_k_forward

    key = (id(blocks), tuple(x.shape), x.device)
    if key not in _FEWEST:  # measured as the check does: a training step, dropout on
        was = blocks.training
        with torch.enable_grad():
            blocks.train()
            _FEWEST[key], _ = fewest_first_k(blocks, x.detach(), THRESHOLDS["peak_ratio"].value)
        blocks.train(was)
    return first_k_forward(_FEWEST[key])(blocks, x)


@reference
def reference_plan(effective_batch: int, budget_bytes: int, probe) -> tuple[int, int, bool]:
    """The fastest (micro_batch, accum_steps, checkpoint) whose measured peak fits the budget,
    with micro_batch * accum_steps == effective_batch, among all divisors of it."""
    candidates = [
        probe(m, ckpt)
        for m in range(1, effective_batch + 1)
        if effective_batch % m == 0
        for ckpt in (False, True)
    ]
    fitting = [c for c in candidates if c.peak_bytes <= budget_bytes]
    if not fitting:
        raise ValueError(f"nothing fits in {budget_bytes} bytes")
    best = max(fitting, key=lambda c: c.samples_per_s)
    return best.micro_batch, effective_batch // best.micro_batch, best.checkpoint
