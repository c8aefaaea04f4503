"""Lesson 07: gradient accumulation and activation checkpointing (see demo, reference, checks)."""

from .checks import (
    EFFECTIVE_BATCH,
    THRESHOLDS,
    budgets,
    check_accumulation,
    check_checkpointed_forward,
    check_plan,
)
from .demo import (
    GUIDE_SNIPPET,
    Probe,
    batchnorm_caveat,
    guide_snippet_error,
    make_blocks,
    plot_plans,
    plot_sweep,
    rng_under_recompute,
    segment_sweep,
)
from .reference import reference_accumulate_epoch, reference_checkpointed_forward, reference_plan

__all__ = [
    "EFFECTIVE_BATCH",
    "GUIDE_SNIPPET",
    "THRESHOLDS",
    "Probe",
    "batchnorm_caveat",
    "budgets",
    "check_accumulation",
    "check_checkpointed_forward",
    "check_plan",
    "guide_snippet_error",
    "make_blocks",
    "plot_plans",
    "plot_sweep",
    "reference_accumulate_epoch",
    "reference_checkpointed_forward",
    "reference_plan",
    "rng_under_recompute",
    "segment_sweep",
]
