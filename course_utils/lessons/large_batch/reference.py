"""Lesson 02b's reference answer to exercise 1 (the LR schedule); LARS and the optimizer
choice have theirs beside their checks (lars.py, lars_choice.py). Demos and checks may call
them; a learner's function may not while it is graded (`@reference`)."""

from __future__ import annotations

import torch

from ...checks import reference


@reference
def reference_lr_schedule(optimizer, batch_size: int, warmup_steps: int, base_batch: int = 256):
    """Goyal et al. 2017: LR x (B / base_batch), reached linearly from the base LR over
    `warmup_steps` (stepped per batch). Verified by check 02b-lr-scaling."""
    k = batch_size / base_batch
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda t: 1 + (k - 1) * min(t, warmup_steps) / warmup_steps
    )
