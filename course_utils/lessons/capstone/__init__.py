"""Lesson 11, the capstone: a speed-run to a target accuracy, its ablation, and a diagnosis."""

from .ablate import ablation, describe, plot_ablation, summarise, variants
from .checks import PAIRS, THRESHOLDS, check_speedrun
from .demo import baseline_loop, compare_airbench, mode_note, tuned_loop
from .recipe import (
    BASELINE,
    TARGET,
    Recipe,
    Run,
    decode_all,
    device_batches,
    fit,
    grad_scaler,
    held_out_accuracy,
    train_recipe,
    training_set,
    tuned_recipe,
)
from .reference import reference_speedrun

__all__ = [
    "BASELINE",
    "PAIRS",
    "TARGET",
    "THRESHOLDS",
    "Recipe",
    "Run",
    "ablation",
    "baseline_loop",
    "check_speedrun",
    "compare_airbench",
    "decode_all",
    "describe",
    "device_batches",
    "fit",
    "grad_scaler",
    "held_out_accuracy",
    "mode_note",
    "plot_ablation",
    "reference_speedrun",
    "summarise",
    "train_recipe",
    "training_set",
    "tuned_loop",
    "tuned_recipe",
    "variants",
]
