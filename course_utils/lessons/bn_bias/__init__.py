"""Lesson 09, no bias before BatchNorm: what the notebook uses, re-exported."""

from .checks import THRESHOLDS, check_remove_biases, check_speed_verdict
from .dataflow import feeds_bn
from .demo import (
    cancellation,
    equal_work_ratios,
    fusion_cases,
    inference_comparison,
    pointwise_net,
    real_speedup_ratios,
    scenario_input,
    scenario_model,
    small_variance_model,
    train_step_comparison,
)
from .fusion import check_fuse
from .plots import plot_pair_ratios
from .probes import batch_norm_calls
from .reference import (
    reference_fuse_for_inference,
    reference_remove_redundant_biases,
    reference_speed_verdict,
)

__all__ = [
    "THRESHOLDS",
    "batch_norm_calls",
    "cancellation",
    "check_fuse",
    "check_remove_biases",
    "check_speed_verdict",
    "equal_work_ratios",
    "feeds_bn",
    "fusion_cases",
    "inference_comparison",
    "plot_pair_ratios",
    "pointwise_net",
    "real_speedup_ratios",
    "reference_fuse_for_inference",
    "reference_remove_redundant_biases",
    "reference_speed_verdict",
    "scenario_input",
    "scenario_model",
    "small_variance_model",
    "train_step_comparison",
]

# harness functions that compute an exercise's answer under another name: the grading kernel
# withholds them (course_utils.grading.kernel_harness), and the learner edition too. The list
# of redundant layers lives in the check (checks._truth), which the kernel's harness strips.
# checks._clear is 09-speed-verdict's rule (when ratios say "faster" plainly): the edition's
# self-check of that exercise says "graded by your instructor" without it. feeds_bn stays: the
# notebook hands it to learners for exercises 1 and 3 (deciding which biases to remove,
# keeping the eval outputs and fusing are the exercises), and the solutions call it.
ANSWERS_ELSEWHERE = ("course_utils.lessons.bn_bias.checks:_clear",)
