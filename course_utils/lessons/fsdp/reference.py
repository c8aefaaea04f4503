"""Reference answers of lesson 13 (each verified by its check in tests/test_lesson_13.py, and
on 2 gloo processes by the notebook's measurements, torch 2.14, cpu-bf16 class)."""

from __future__ import annotations

from ...checks import reference
from .sharding import fake_peak

STATES = {"sgd": 0, "momentum": 1, "adam": 2}  # tensors of a parameter's shape per parameter
STEP_BYTES = {"adam": 4}  # Adam's step counter: one float32 scalar tensor per parameter


def _bytes(p) -> int:
    return p.numel() * p.element_size()


def _first_shard(p, world: int) -> int:
    """Bytes of rank 0's piece of `p` under FSDP2: torch.chunk on dim 0, so rank 0 gets
    ceil(rows / world) rows (the other ranks' pieces are padded to that size too)."""
    if p.dim() == 0:
        return p.element_size()
    rows = -(-p.shape[0] // world)
    return rows * (p.numel() // p.shape[0]) * p.element_size()


def _zero_partition(params, world: int) -> list[list]:
    """ZeroRedundancyOptimizer's partition: largest parameter first, each to the rank with
    the fewest elements so far (the lowest rank on a tie)."""
    ranks, sizes = [[] for _ in range(world)], [0] * world
    for p in sorted(params, key=lambda t: t.numel(), reverse=True):
        r = sizes.index(min(sizes))
        ranks[r].append(p)
        sizes[r] += p.numel()
    return ranks


@reference
def reference_predict_bytes(model, strategy: str, world_size: int, optimizer: str) -> dict:
    """Bytes of parameters, gradients and optimizer state on the rank that holds the most of
    each, after one training step (the optimizer built over the trainable parameters)."""
    params = list(model.parameters())
    trained = [p for p in params if p.requires_grad]
    states, step = STATES[optimizer], STEP_BYTES.get(optimizer, 0)
    if strategy == "fsdp":
        piece = [_first_shard(p, world_size) for p in trained]
        return {
            "parameters": sum(_first_shard(p, world_size) for p in params),
            "gradients": sum(piece),
            "optimizer": sum(states * b + step for b in piece),
        }
    full = [_bytes(p) for p in trained]
    if strategy == "ddp":
        held = sum(states * b + step for b in full)
    else:  # zero1: whole parameters' states, partitioned over the ranks
        parts = _zero_partition(trained, world_size)
        held = max(sum(states * _bytes(p) + step for p in part) for part in parts)
    return {"parameters": sum(map(_bytes, params)), "gradients": sum(full), "optimizer": held}


@reference
def reference_choose_plan(scenario) -> tuple[str, bool]:
    """The first plan, fastest first as section 4 measured them, whose peak on every rank
    (measured on a pretend world) fits the device."""
    fastest_first = (("ddp", False), ("zero1", False), ("fsdp", False), ("fsdp", True))
    for strategy, reshard in fastest_first:
        need = max(
            fake_peak(
                scenario.model,
                strategy,
                scenario.optimizer,
                scenario.batch,
                scenario.world_size,
                reshard=reshard,
                rank=rank,
            )
            for rank in range(scenario.world_size)
        )
        if need <= scenario.device_bytes:
            return strategy, reshard
    return "fsdp", True
