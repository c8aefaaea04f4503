"""Lesson 02, batch size: throughput against batch size, the largest batch that fits, and the
gradient noise scale with the critical batch (lesson 02b, large_batch, sets the learning rate
and the optimizer for a large batch). The notebook uses it as `lesson`."""

from ...device import is_out_of_memory, release_cached_memory
from ...measure import knee, steady_cpu
from ...quadratic import DEMO, steps_to_target
from .checks import (
    THRESHOLDS,
    check_largest_batch,
    check_noise_scale,
    check_throughput_sweep,
)
from .colleagues import colleague_sweep
from .demo import (
    MiB,
    SimulatedMemory,
    TrainStep,
    budgeted,
    known_cost_steps,
    largest_batch_cuda,
    make_step,
    simulated_steps,
)
from .reference import (
    reference_largest_batch,
    reference_noise_scale,
    reference_sweep,
)
from .regression import (
    NoisyRegression,
    fit_critical_batch,
    noise_scale_start_and_end,
    plot_critical_batch,
)

__all__ = [
    "DEMO",
    "THRESHOLDS",
    "MiB",
    "NoisyRegression",
    "SimulatedMemory",
    "TrainStep",
    "budgeted",
    "check_largest_batch",
    "check_noise_scale",
    "check_throughput_sweep",
    "colleague_sweep",
    "fit_critical_batch",
    "is_out_of_memory",
    "knee",
    "known_cost_steps",
    "largest_batch_cuda",
    "make_step",
    "noise_scale_start_and_end",
    "plot_critical_batch",
    "reference_largest_batch",
    "reference_noise_scale",
    "reference_sweep",
    "release_cached_memory",
    "simulated_steps",
    "steady_cpu",
    "steps_to_target",
]

# harness functions that compute one of this lesson's answers under another name: the grading
# kernel withholds them (course_utils.grading.kernel_harness). On a CUDA device the demo's own
# probe returns 02-largest-batch's answer.
ANSWERS_ELSEWHERE = ("course_utils.lessons.batch_size.demo:largest_batch_cuda",)
