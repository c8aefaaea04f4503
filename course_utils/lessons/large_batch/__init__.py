"""Lesson 02b, large batches: the learning rate as the batch grows (linear scaling with
warm-up, and what it buys in time to a target), and optimizers for large batches (LARS and
LAMB's layer-wise trust ratios, raced against AdamW). The notebook uses it as `lesson`."""

from ...measure import steady_cpu
from ...quadratic import DEMO, steps_to_target, steps_with_schedule
from .checks import THRESHOLDS, check_lr_schedule, check_optimizer_choice, check_trust_ratio
from .colleagues import ColleagueLARS, colleague_schedule, lars_symptoms
from .demo import lr_per_step, plot_time_to_target, seconds_per_step, time_to_target
from .lars import ReferenceLAMB, ReferenceLARS
from .lars_choice import reference_choose_optimizer
from .lars_demo import (
    large_batch_race,
    plot_race,
    race_setup,
    race_table,
    race_target,
    race_verdict,
)
from .reference import reference_lr_schedule

__all__ = [
    "DEMO",
    "THRESHOLDS",
    "ColleagueLARS",
    "ReferenceLAMB",
    "ReferenceLARS",
    "check_lr_schedule",
    "check_optimizer_choice",
    "check_trust_ratio",
    "colleague_schedule",
    "large_batch_race",
    "lars_symptoms",
    "lr_per_step",
    "plot_race",
    "plot_time_to_target",
    "race_setup",
    "race_table",
    "race_target",
    "race_verdict",
    "reference_choose_optimizer",
    "reference_lr_schedule",
    "seconds_per_step",
    "steady_cpu",
    "steps_to_target",
    "steps_with_schedule",
    "time_to_target",
]

# harness functions that compute one of this lesson's answers under another name: the grading
# kernel withholds them (course_utils.grading.kernel_harness). lr_check.factor is the two
# rules of 02b-lr-scaling for any step; lars.trust_ratio is LARS's guarded ratio
# (02b-trust-ratio's core; LAMB keeps its own, lars.layer_ratio); lars_specimen.simulate
# replays LARS on the check's specimen.
ANSWERS_ELSEWHERE = (
    "course_utils.lessons.large_batch.lr_check:factor",
    "course_utils.lessons.large_batch.lars:trust_ratio",
    "course_utils.lessons.large_batch.lars_specimen:simulate",
)
