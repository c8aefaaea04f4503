"""Lesson 02b's probe for exercise 1 (02b-lr-scaling): the learner's scheduler drives an
optimizer beside the learner's code and the LR of each param group at each step comes back as
data (course_utils.probes); lr_check.py computes what it must be. LARS and the optimizer
choice have theirs in lars_probes.py."""

from __future__ import annotations

from ...probes import probe
from .demo import lr_per_step


@probe
def lr_traces(make_schedule, lrs: list, batch: int, warmup: int, steps: int, base_batch: int):
    """The LR of each param group (initial LRs `lrs`) at each step under the learner's
    scheduler (demo.lr_per_step): one list per group."""
    return lr_per_step(make_schedule, tuple(lrs), batch, warmup, steps, base_batch)
