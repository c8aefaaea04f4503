"""Lesson 07: gradient accumulation and activation checkpointing (see demo, layouts,
diagnose, reference, checks)."""

from .checks import (
    EFFECTIVE_BATCH,
    THRESHOLDS,
    budgets,
    check_accumulation,
    check_checkpointed_forward,
    check_plan,
    time_limit,
)
from .demo import (
    batchnorm_caveat,
    full_batch_trajectory,
    guide_accumulate_epoch,
    learner_trajectory,
    make_accum_problem,
    make_blocks,
    plot_sweep,
    rel_error,
    rng_under_recompute,
    segment_sweep,
)
from .layouts import StepCost, layout_table, step_cost
from .planning import Probe, plot_plans
from .reference import reference_accumulate_epoch, reference_checkpointed_forward, reference_plan

__all__ = [
    "EFFECTIVE_BATCH",
    "THRESHOLDS",
    "Probe",
    "StepCost",
    "batchnorm_caveat",
    "budgets",
    "check_accumulation",
    "check_checkpointed_forward",
    "check_plan",
    "full_batch_trajectory",
    "guide_accumulate_epoch",
    "layout_table",
    "learner_trajectory",
    "make_accum_problem",
    "make_blocks",
    "plot_plans",
    "plot_sweep",
    "reference_accumulate_epoch",
    "reference_checkpointed_forward",
    "reference_plan",
    "rel_error",
    "rng_under_recompute",
    "segment_sweep",
    "step_cost",
    "time_limit",
]
