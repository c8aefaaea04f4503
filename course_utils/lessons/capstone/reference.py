"""The reference speed-run, verified by `tests/test_lesson_11.py` (reaches the target on
held-out data, faster than the baseline) in quick mode on cpu and cpu-bf16 machines."""

from __future__ import annotations

from torch import nn
from torch.utils.data import Dataset

from ...checks import reference
from .recipe import fit, tuned_recipe


@reference
def reference_speedrun(train_set: Dataset) -> nn.Module:
    """The tuned recipe for this device: one-cycle AdamW at a larger batch, data decoded once
    and augmented on the device, autocast where it pays (fp16 through a GradScaler), no
    redundant biases, no syncs."""
    return fit(tuned_recipe(), train_set, label="speed-run").model
