"""Lesson 09, no bias before BatchNorm: what the notebook uses, re-exported."""

from .checks import THRESHOLDS, check_remove_biases, check_speed_verdict
from .dataflow import feeds_bn
from .demo import (
    REDUNDANT,
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
from .fusion import batch_norm_calls, check_fuse
from .plots import plot_pair_ratios
from .reference import (
    reference_fuse_for_inference,
    reference_remove_redundant_biases,
    reference_speed_verdict,
)

__all__ = [
    "REDUNDANT",
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
