"""Exercise 2's levers on the notebook's GPT step: checkpointing (none, selective, full),
activation offload, and micro-batches (gradient accumulation keeps the batch), measured.

`measure_plan` runs one micro-batch of the plan and scales by their number: held bytes are one
micro-batch's (they run one after another), recomputed FLOPs and offloaded bytes the step's.
Offload applies here with checkpointing "none": the bytes autograd saves
(course_utils.memory.activation_bytes, lesson 07's counter) leave the device, so the device
keeps what the forward holds minus them. On this CPU nothing moves (section 3); the count is
what a GPU would send over PCIe.
"""

from __future__ import annotations

import functools
from dataclasses import replace

from torch.utils.checkpoint import CheckpointPolicy

from ...memory import activation_bytes
from .levers import baseline, measure, policy_contexts
from .model import DEFAULT, Size, batch, build, loss_of

MICRO_BATCHES = (1, 2, 4)
CHECKPOINTING = ("none", "selective", "full")


def matmuls_saved(ctx, op, *args, **kwargs):
    """The selective policy plans use: save matmuls and attention, recompute the rest."""
    costly = str(op).startswith(("aten.mm.", "aten.addmm.", "aten.bmm.", "aten._scaled_dot"))
    return CheckpointPolicy.MUST_SAVE if costly else CheckpointPolicy.PREFER_RECOMPUTE


def _validate(plan) -> tuple[str, int, bool]:
    if not isinstance(plan, dict) or set(plan) != {"checkpointing", "micro_batches", "offload"}:
        raise ValueError(
            'a plan is {"checkpointing": "none" | "selective" | "full", "micro_batches": 1 | 2 '
            f'| 4, "offload": True | False}}, got {plan!r}'
        )
    ckpt, n, offload = plan["checkpointing"], plan["micro_batches"], plan["offload"]
    if ckpt not in CHECKPOINTING or n not in MICRO_BATCHES or not isinstance(offload, bool):
        raise ValueError(
            f"no such plan: {plan!r} (checkpointing {CHECKPOINTING}, micro_batches {MICRO_BATCHES})"
        )
    if offload and ckpt != "none":
        raise ValueError("offload is a lever here with checkpointing 'none' only")
    return ckpt, n, offload


@functools.cache
def _one(size: Size, ckpt: str, offload: bool) -> tuple[int, int, int]:
    """(held, recomputed, offloaded) bytes/FLOPs of one micro-batch of `size`."""
    if ckpt == "none":
        held = baseline(size)["none"]["held"]
        model = build(size)
        tokens, targets = batch(size)
        saved = activation_bytes(lambda: loss_of(model, tokens, targets)) if offload else 0
        return max(held - saved, 0), 0, saved
    got = measure(size, ckpt, policy_contexts(matmuls_saved) if ckpt == "selective" else None)
    return got["held"], got["recomputed"], 0


def measure_plan(plan: dict, size: Size = DEFAULT) -> dict:
    """{"held": bytes on the device after a micro-batch's forward, "recomputed": FLOPs per step,
    "offloaded": bytes per step sent to the host} of `plan` on the GPT step of `size`."""
    ckpt, n, offload = _validate(plan)
    if size.rows % n:
        raise ValueError(f"{size.rows} rows do not split into {n} micro-batches")
    held, recomputed, offloaded = _one(replace(size, rows=size.rows // n), ckpt, offload)
    return {"held": held, "recomputed": n * recomputed, "offloaded": n * offloaded}


def every_plan() -> list[dict]:
    return [
        {"checkpointing": c, "micro_batches": n, "offload": o}
        for c in CHECKPOINTING
        for n in MICRO_BATCHES
        for o in ((False, True) if c == "none" else (False,))
    ]


def cost(plan: dict, got: dict) -> tuple[int, int, bool]:
    """What a plan costs, in the order it matters: recomputed FLOPs, then micro-batches (small
    matmuls use a GPU badly), then offload (PCIe traffic)."""
    return got["recomputed"], plan["micro_batches"], plan["offload"]
