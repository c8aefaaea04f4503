"""Lesson 05's reference answers. Verified by tests/test_lesson_05.py on a cpu-bf16 machine
(torch 2.14, 2 cores): each passes its check, and the demos use them before the learner
has written their own."""

from __future__ import annotations

import random
from collections import defaultdict

import torch
import torch.nn.functional as F
from torch import nn

from ...checks import reference
from .layout import CL, LegacySqueezeExcite

STEP = 16  # bucket edge in pixels: 16 -> 37 shapes, 38% padding on the lesson's data set


def _round_up(n: int, step: int = STEP) -> int:
    return -(-n // step) * step


@reference
def reference_bucket_batches(
    sizes: list[tuple[int, int]], batch_size: int, seed: int = 0
) -> list[list[int]]:
    """Group indices by their size rounded up to STEP pixels per side, cut each group into
    batches, and shuffle the batches (torchvision's GroupedBatchSampler does the same by
    aspect ratio). Every sample lands in exactly one batch; only the last batch of a group
    may be short."""
    groups: dict[tuple[int, int], list[int]] = defaultdict(list)
    order = list(range(len(sizes)))
    rng = random.Random(seed)
    rng.shuffle(order)
    for i in order:
        h, w = sizes[i]
        groups[(_round_up(h), _round_up(w))].append(i)
    batches = [g[k : k + batch_size] for g in groups.values() for k in range(0, len(g), batch_size)]
    rng.shuffle(batches)
    return batches


@reference
def reference_pad_collate(images: list[torch.Tensor]) -> torch.Tensor:
    """Pad every image at the bottom and right to the batch's bucket size: the largest
    height and width rounded up to STEP, so all batches of a bucket share one shape."""
    h = _round_up(max(im.shape[1] for im in images))
    w = _round_up(max(im.shape[2] for im in images))
    return torch.stack([F.pad(im, (0, w - im.shape[2], 0, h - im.shape[1])) for im in images])


class ReferenceSqueezeExcite(LegacySqueezeExcite):
    """The SE gate without the layout-breaking `.contiguous()`: the channel means come from
    `mean` over the spatial dims, which reads any layout, and `x * gate` keeps x's layout."""

    @reference
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = torch.sigmoid(self.fc2(torch.relu(self.fc1(x.mean((2, 3))))))
        return x * gate[:, :, None, None]


@reference
def reference_to_channels_last(model: nn.Module, x: torch.Tensor) -> tuple[nn.Module, torch.Tensor]:
    """Both the weights and the input: a convolution given one of each converts on every call."""
    return model.to(memory_format=CL), x.to(memory_format=CL)


@reference
def reference_should_compile(timing, run_steps: int, compiles: int = 1) -> bool:
    """True when a run of `run_steps` steps finishes sooner compiled than eager.

    Both runs take `run_steps` steps. The compiled one pays, per compile (one per shape under
    dynamic=False), the first call minus the step that call also ran; then a compiled step
    each. A tie gains nothing, so it stays eager."""
    compile_cost = compiles * (timing.first_call_s - timing.compiled_step_s)
    return compile_cost + run_steps * timing.compiled_step_s < run_steps * timing.eager_step_s
