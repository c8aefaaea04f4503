"""Lesson 11, the capstone: a speed-run to a target accuracy, its ablation, and a diagnosis."""

from .checks import THRESHOLDS, check_speedrun
from .demo import (
    BASELINE,
    TARGET,
    Recipe,
    ablation,
    baseline_loop,
    compare_airbench,
    decode_all,
    device_batches,
    held_out_accuracy,
    plot_ablation,
    summarise,
    train_recipe,
    training_set,
    tuned_loop,
    tuned_recipe,
)
from .reference import reference_speedrun

__all__ = [
    "BASELINE",
    "TARGET",
    "THRESHOLDS",
    "Recipe",
    "ablation",
    "baseline_loop",
    "compare_airbench",
    "check_speedrun",
    "decode_all",
    "device_batches",
    "held_out_accuracy",
    "plot_ablation",
    "reference_speedrun",
    "summarise",
    "train_recipe",
    "training_set",
    "tuned_loop",
    "tuned_recipe",
]
