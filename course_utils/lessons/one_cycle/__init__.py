"""Lesson 01: the learning-rate range test, one-cycle and warm-up + cosine schedules, and
AdamW's decoupled weight decay. demo (data, runs, recorders, summary), reference (answers),
judge (what the checks measure and how they read it), checks (graded checks, thresholds)."""

from .checks import THRESHOLDS, check_adamw, check_lr_range_test, check_one_cycle
from .demo import (
    DECAY_SCALES,
    WARMUP_FRACTION,
    WEIGHT_DECAY,
    adam_step,
    adamw,
    batch_stream,
    data,
    decay_demo,
    fresh_model,
    loaders,
    make_schedule,
    plot_range_test,
    record_schedule,
    steps_table,
    summary,
    train_on_next,
    train_run,
)
from .judge import RANGE_SWEEP, run_range_test
from .reference import (
    reference_configure_optimizer,
    reference_fit_one_cycle,
    reference_lr_range_test,
    reference_suggest_lr,
)

__all__ = [
    "DECAY_SCALES",
    "RANGE_SWEEP",
    "THRESHOLDS",
    "WARMUP_FRACTION",
    "WEIGHT_DECAY",
    "adam_step",
    "adamw",
    "batch_stream",
    "check_adamw",
    "check_lr_range_test",
    "check_one_cycle",
    "data",
    "decay_demo",
    "fresh_model",
    "loaders",
    "make_schedule",
    "plot_range_test",
    "record_schedule",
    "reference_configure_optimizer",
    "reference_fit_one_cycle",
    "reference_lr_range_test",
    "reference_suggest_lr",
    "run_range_test",
    "steps_table",
    "summary",
    "train_on_next",
    "train_run",
]

# harness functions that compute an exercise's answer under another name: the grading kernel
# withholds them (course_utils.grading.kernel_harness). None here: the range test's two param
# groups (demo.adamw_two_groups) split the head from the body, not decay from no decay, so no
# helper builds exercise 3's optimizer; OneCycleLR and cu.train are PyTorch's and the course's
# own loop, which the exercises ask the learner to use rightly.
ANSWERS_ELSEWHERE = ()
