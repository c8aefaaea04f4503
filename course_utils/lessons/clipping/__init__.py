"""Lesson 08, gradient clipping: what the notebook uses, re-exported."""

from .accum_check import check_accumulated_clipped_step
from .checks import (
    THRESHOLDS,
    check_choose_max_norm,
    check_clipped_step,
    check_total_norm,
)
from .demo import (
    RunLog,
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
    reference_accumulated_clipped_step,
    reference_choose_max_norm,
    reference_clipped_step,
    reference_total_norm,
)
from .symptoms import accumulation_table, norm_summary, norm_table

__all__ = [
    "THRESHOLDS",
    "RunLog",
    "accumulation_table",
    "by_value_step",
    "check_accumulated_clipped_step",
    "check_choose_max_norm",
    "check_clipped_step",
    "check_total_norm",
    "logging_cost",
    "make_rnn",
    "norm_summary",
    "norm_table",
    "plot_runs",
    "plot_sweep",
    "reference_accumulated_clipped_step",
    "reference_choose_max_norm",
    "reference_clipped_step",
    "reference_total_norm",
    "rnn_batches",
    "sweep",
    "synthetic_history",
    "train_rnn",
    "unclipped_step",
]

# harness functions that compute an exercise's answer under another name: the grading kernel
# withholds them (course_utils.grading.kernel_harness). accumulation._whole_batch_step is
# exercise 2's clipped step (on micro-batches put back together). The demo cells that call
# them stop there, with "(skipped: ...)". (diagnosis.total_norm is torch's get_total_norm, which
# exercise 1's check refuses while the learner's function runs: no answer of ours.)
ANSWERS_ELSEWHERE = ("course_utils.lessons.clipping.accumulation:_whole_batch_step",)
