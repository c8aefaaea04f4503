"""Lesson 07, exercise 2: what a checkpointing layout costs, and the fewest blocks a memory
budget needs checkpointed.

A layout has two costs, both measured on one training step (forward + backward) of the
16-block stack: the peak bytes of live tensors (`memory.tensor_peak_bytes`, any device;
deterministic) against the plain step's, and the Linear layers that backward runs again to
rebuild what was not kept (a forward hook on every `nn.Linear` counts its calls). The second
is what the recomputation costs in time, counted exactly instead of timed on a noisy machine.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from ...measure import steady_cpu
from ...memory import tensor_peak_bytes
from ...progress import tqdm
from .demo import linear_calls, plain_forward, train_step


@dataclass(frozen=True)
class StepCost:
    """One layout's training step against the plain one."""

    peak_ratio: float  # peak live tensor bytes / the plain step's
    reruns: int  # Linear forwards beyond the plain step's: the recomputation in backward


def plain_cost(blocks: nn.Sequential, x: torch.Tensor) -> tuple[int, int]:
    """(peak bytes, Linear calls) of the plain step `blocks(x)`: what layouts are set beside."""
    plain = train_step(plain_forward, blocks, x)
    with steady_cpu():
        return tensor_peak_bytes(plain), linear_calls(blocks, plain)


def step_cost(
    forward: Callable, blocks: nn.Sequential, x: torch.Tensor, plain: tuple[int, int] | None = None
) -> StepCost:
    """Peak memory and recomputation of a training step of `forward(blocks, x)`, each set
    beside the plain step (`plain_cost`; dropout as `blocks` is set: train mode here)."""
    plain_peak, plain_calls = plain or plain_cost(blocks, x)
    step = train_step(forward, blocks, x)
    with steady_cpu():  # one thread: the same bytes, and steadier on a shared CPU
        return StepCost(
            tensor_peak_bytes(step) / plain_peak, linear_calls(blocks, step) - plain_calls
        )


def first_k_forward(k: int) -> Callable:
    """Checkpoint the first `k` blocks one by one; run the others as they are."""

    def forward(blocks: nn.Sequential, x: torch.Tensor) -> torch.Tensor:
        for i, block in enumerate(blocks):
            x = checkpoint(block, x, use_reentrant=False) if i < k else block(x)
        return x

    return forward


def fewest_first_k(blocks: nn.Sequential, x: torch.Tensor, budget: float) -> tuple[int, StepCost]:
    """The smallest k whose `first_k_forward(k)` step peaks within `budget` (x the plain
    peak), by bisection: each block checkpointed lowers the peak (measured for k = 0..16 on
    the check's stack). Returns (k, its cost); k = len(blocks) when even that is over."""
    lo, hi = 0, len(blocks)  # invariant: first_k(hi) fits, or hi is every block
    costs: dict[int, StepCost] = {}
    plain = plain_cost(blocks, x)

    def cost(k: int) -> StepCost:
        if k not in costs:
            costs[k] = step_cost(first_k_forward(k), blocks, x, plain)
        return costs[k]

    while lo < hi:
        mid = (lo + hi) // 2
        if cost(mid).peak_ratio <= budget:
            hi = mid
        else:
            lo = mid + 1
    return hi, cost(hi)


def last_k_forward(k: int) -> Callable:
    """Checkpoint the last `k` blocks one by one; run the others as they are."""

    def forward(blocks: nn.Sequential, x: torch.Tensor) -> torch.Tensor:
        start = len(blocks) - k
        for i, block in enumerate(blocks):
            x = checkpoint(block, x, use_reentrant=False) if i >= start else block(x)
        return x

    return forward


def layout_table(blocks: nn.Sequential, x: torch.Tensor, ks: list[int]) -> list[tuple]:
    """(layout, StepCost) for the first k blocks checkpointed one by one (each k in `ks`), the
    last k of the largest of them, and checkpoint_sequential with sqrt(n) segments."""
    from .demo import segments_forward

    print("measuring the peak and recomputation of each layout ...")
    plain, n = plain_cost(blocks, x), len(blocks)
    rows = [(f"first {k} blocks, one by one", first_k_forward(k)) for k in ks]
    rows.append((f"last {max(ks)} blocks, one by one", last_k_forward(max(ks))))
    root = round(n**0.5)
    rows.append((f"checkpoint_sequential, {root} segments", segments_forward(root)))
    bar = tqdm(rows, desc="layouts", leave=False)  # about a second each on a loaded CPU
    return [(name, step_cost(fwd, blocks, x, plain)) for name, fwd in bar]
