"""Lesson 00, measuring honestly: timing asynchronous work, bytes saved for backward, FLOPs,
and where the time goes (torch.profiler). See demo (workloads), reference (answers) and
checks (the graded checks and their thresholds)."""

from .checks import (
    THRESHOLDS,
    check_activation_bytes,
    check_train_flops,
)
from .demo import (
    activation_cases,
    cuda_event_ms,
    hidden_op_steps,
    make_async_step,
    memory_snapshot,
    naive_time,
    profile_step,
    with_one_off,
)
from .reference import (
    reference_saved_bytes,
    reference_slowest_op,
    reference_time_step,
    reference_train_flops,
)
from .slowest_op import check_slowest_op
from .timer_check import check_step_timer

__all__ = [
    "THRESHOLDS",
    "activation_cases",
    "check_activation_bytes",
    "check_slowest_op",
    "check_step_timer",
    "check_train_flops",
    "cuda_event_ms",
    "hidden_op_steps",
    "make_async_step",
    "memory_snapshot",
    "naive_time",
    "profile_step",
    "reference_saved_bytes",
    "reference_slowest_op",
    "reference_time_step",
    "reference_train_flops",
    "with_one_off",
]

# harness functions that compute an exercise's answer: the grading kernel withholds them
# (course_utils.grading.kernel_harness)
ANSWERS_ELSEWHERE = ("course_utils.memory:activation_bytes",)
