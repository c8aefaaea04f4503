"""Lesson 07: gradient accumulation and activation checkpointing (see demo, layouts,
diagnose, planning, reference; the checks in accumulation_check, checks and plan_check, each
running the learner's code through probes)."""

from .accumulation_check import check_accumulation
from .checks import THRESHOLDS, check_checkpointed_forward, time_limit
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
from .plan_check import check_plan
from .planning import EFFECTIVE_BATCH, Probe, budgets, plot_plans
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

# harness functions that compute an exercise's answer under another name: the grading kernel
# withholds them (course_utils.grading.kernel_harness). first_k_forward(12) is exercise 2's
# answer and fewest_first_k finds its k (the demo of layouts that uses them stops there).
# Looked at and kept: demo.segments_forward (checkpoint_sequential with n segments; 13 is a
# valid answer, but the segment sweep's cell, not a demo, runs it) and demo.per_block_forward (a
# wrong answer)
ANSWERS_ELSEWHERE = (
    "course_utils.lessons.accumulation.layouts:first_k_forward",
    "course_utils.lessons.accumulation.layouts:fewest_first_k",
)
