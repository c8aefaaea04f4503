"""Lesson 08, gradient clipping: what the notebook uses, re-exported."""

from .checks import (
    THRESHOLDS,
    check_amp_clipped_step,
    check_choose_max_norm,
    check_clipped_step,
    check_total_norm,
)
from .demo import (
    RunLog,
    amp_problem,
    by_value_step,
    logging_cost,
    make_rnn,
    plot_runs,
    plot_sweep,
    rnn_batches,
    sweep,
    synthetic_history,
    train_rnn,
    unclipped_step,
)
from .reference import (
    reference_amp_clipped_step,
    reference_choose_max_norm,
    reference_clipped_step,
    reference_total_norm,
)
from .symptoms import fp32_clipped_step, norm_summary, norm_table, train_amp

__all__ = [
    "THRESHOLDS",
    "RunLog",
    "amp_problem",
    "by_value_step",
    "check_amp_clipped_step",
    "check_choose_max_norm",
    "check_clipped_step",
    "check_total_norm",
    "logging_cost",
    "fp32_clipped_step",
    "make_rnn",
    "norm_summary",
    "norm_table",
    "plot_runs",
    "plot_sweep",
    "reference_amp_clipped_step",
    "reference_choose_max_norm",
    "reference_clipped_step",
    "reference_total_norm",
    "rnn_batches",
    "sweep",
    "train_amp",
    "synthetic_history",
    "train_rnn",
    "unclipped_step",
]
