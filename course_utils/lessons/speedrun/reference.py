"""Lesson 18's reference answers: the course's published recipe (the role airbench plays in
lesson 11), its speed-run, and the lever its ablation ranks first here. Verified by
tests/test_lesson_18.py in quick mode on a cpu-bf16 machine (2-core, torch 2.14)."""

from __future__ import annotations

import torch
from torch import nn

from ...checks import reference
from ...device import get_device
from ...mode import pick
from .recipe import Recipe, bf16_pays, fit


@reference
def reference_recipe(device: torch.device | None = None) -> Recipe:
    """Every lever the course measured to pay for this model here: packed rows (no padding),
    SDPA, fused AdamW on a GPU (foreach measured no faster for this model on a CPU), twice the rows at a higher peak rate with warm-up and cosine
    decay; bf16 autocast only where lesson 04 measured it to pay on GPUs (on a CPU this small
    model's matmuls are too small for it); no compile in quick mode (its first call costs more
    than a one-minute run saves), no checkpointing (it trades time for memory)."""
    device = device or get_device()
    return Recipe(
        steps=pick(quick=1200, full=3000),
        rows=pick(quick=16, full=64),
        lr=pick(quick=4e-3, full=3e-3),
        schedule=True,
        attention="sdpa",
        packing=True,
        fused_optimizer=device.type == "cuda",  # foreach measured no faster on a CPU
        amp=device.type == "cuda" and bf16_pays(device),
        compile=pick(quick=False, full=device.type == "cuda"),
    )


@reference
def reference_speedrun(text) -> nn.Module:
    """The reference recipe trained by the lesson's loop."""
    return fit(reference_recipe(), text).model


@reference
def reference_biggest_lever() -> str:
    """What the ablation of the reference recipe ranks first on a CPU (tests/test_lesson_18.py)."""
    return "packing"
