"""Lesson 10, habits: a slow training loop to diagnose and fix, copy-free numpy conversion,
and evaluation without autograd. The notebook imports this package as `lesson`."""

from .checks import THRESHOLDS, check_fast_train
from .conversion import check_to_tensor
from .demo import (
    ablation,
    conversion_timings,
    eval_specimen,
    optimizer_timings,
    plot_ablation,
    shares_memory,
    time_runs,
    zero_grad_effect,
)
from .evaluate_check import check_evaluate
from .loop import (
    HABITS,
    NumpyData,
    TrainLog,
    adamw_step,
    colleague_evaluate,
    make_data,
    make_model,
    quiet,
    slow_train,
    variant_train,
)
from .reference import reference_evaluate, reference_fast_train, reference_to_tensor
from .spy import COST_ORDER, Diagnosis, HabitSpy, diagnose

__all__ = [
    "COST_ORDER",
    "HABITS",
    "THRESHOLDS",
    "Diagnosis",
    "HabitSpy",
    "NumpyData",
    "TrainLog",
    "ablation",
    "adamw_step",
    "colleague_evaluate",
    "check_evaluate",
    "check_fast_train",
    "check_to_tensor",
    "conversion_timings",
    "diagnose",
    "eval_specimen",
    "make_data",
    "make_model",
    "optimizer_timings",
    "plot_ablation",
    "quiet",
    "reference_evaluate",
    "reference_fast_train",
    "reference_to_tensor",
    "shares_memory",
    "slow_train",
    "time_runs",
    "variant_train",
    "zero_grad_effect",
]

# harness functions that compute an exercise's answer under another name: the grading kernel
# withholds them (course_utils.grading.kernel_harness). variant_train with keep=() is
# exercise 1's loop (the ablation's demo stops there, with "(skipped: ...)"), and
# diagnosis.mistake_log the same loop with one named fault (any other name: none); the
# harness's evaluate (course_utils.train) is exercise 3's, given the batches as a loader.
ANSWERS_ELSEWHERE = (
    "course_utils.lessons.habits.loop:variant_train",
    "course_utils.lessons.habits.diagnosis:mistake_log",
    "course_utils.train:evaluate",
)
