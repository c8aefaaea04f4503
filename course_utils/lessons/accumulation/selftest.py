"""What `course selftest` runs for notebook 07: each check with its reference answer, and
the headline effect (activation checkpointing, peak memory) as cells 15-17 do."""

from __future__ import annotations

import torch

from ...device import get_device
from ...effects import effect
from ...mode import pick
from . import reference as ref
from .demo import make_blocks, segment_sweep


def answers() -> dict:
    """check id -> the arguments its locked cell passes, as the reference answers."""
    return {
        "07-accumulation": lambda: (ref.reference_accumulate_epoch,),
        "07-checkpointed-forward": lambda: (ref.reference_checkpointed_forward,),
        "07-plan": lambda: (ref.reference_plan,),
    }


def checkpointing_effect():
    blocks = make_blocks(depth=16, width=32)
    x = torch.randn(512, 32, device=get_device())
    segments = pick(quick=[2, 4, 16], full=[1, 2, 4, 8, 16])
    sweep = segment_sweep(blocks, x, segments, repeats=pick(quick=4, full=10))
    plain = sweep[0]
    at_sqrt = min(sweep[1:], key=lambda p: abs(p.segments - len(blocks) ** 0.5))
    return effect(
        f"activation checkpointing ({at_sqrt.segments} segments)",
        metric="peak memory of a training step",
        baseline=plain.peak_bytes,
        improved=at_sqrt.peak_bytes,
        unit="bytes",
        show=False,
    )


def effects() -> dict:
    return {"activation checkpointing": checkpointing_effect}
