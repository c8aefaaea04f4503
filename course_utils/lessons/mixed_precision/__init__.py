"""Lesson 04, automatic mixed precision: fp16 and bf16 numerics, loss scaling, the AMP step.

The notebook imports this package as `lesson`; see docs/authoring.md for the layout.
"""

from .checks import THRESHOLDS, check_amp_step, check_fp32_island, check_loss_scale
from .demo import (
    AmpEffect,
    amp_verdict,
    autocast_dtypes,
    fp32_grads,
    fp32_step,
    grad_errors,
    measure_amp,
    naive_scores,
    plain_fp16_grads,
    precision_table,
    round_trip,
    scaler_trace,
    score_error,
    score_inputs,
    snapshot,
    speed_workload,
    true_scores,
    zero_fraction,
)
from .plots import plot_amp, plot_gradient_range, plot_scaler_trace
from .reference import (
    reference_make_amp_step,
    reference_rescued_grads,
    reference_stable_scores,
)
from .scenarios import symptom_table, symptoms
from .tf32 import tf32_comparison, tf32_settings

__all__ = [
    "THRESHOLDS",
    "AmpEffect",
    "amp_verdict",
    "autocast_dtypes",
    "check_amp_step",
    "check_fp32_island",
    "check_loss_scale",
    "fp32_grads",
    "fp32_step",
    "grad_errors",
    "measure_amp",
    "naive_scores",
    "score_error",
    "score_inputs",
    "true_scores",
    "plain_fp16_grads",
    "plot_amp",
    "plot_gradient_range",
    "plot_scaler_trace",
    "precision_table",
    "reference_make_amp_step",
    "reference_rescued_grads",
    "reference_stable_scores",
    "round_trip",
    "scaler_trace",
    "snapshot",
    "speed_workload",
    "symptom_table",
    "symptoms",
    "tf32_comparison",
    "tf32_settings",
    "zero_fraction",
]

# harness functions that compute an exercise's answer under another name: the grading kernel
# withholds them (course_utils.grading.kernel_harness). demo.true_scores: softmax(q @ k.T) in
# float64, which autocast leaves alone, so it passes 04-fp32-island as it is.
ANSWERS_ELSEWHERE = ("course_utils.lessons.mixed_precision.demo:true_scores",)
