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
