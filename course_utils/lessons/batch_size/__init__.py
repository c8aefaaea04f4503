"""Lesson 02, batch size: throughput against batch size, the largest batch that fits, the
gradient noise scale and the critical batch, linear LR scaling with warm-up, and optimizers for
large batches (LARS, LAMB). The notebook uses it as `lesson`."""

from ...device import is_out_of_memory, release_cached_memory
from ...measure import knee, steady_cpu
from .checks import (
    THRESHOLDS,
    check_largest_batch,
    check_noise_scale,
    check_throughput_sweep,
)
from .colleagues import ColleagueLARS, colleague_schedule, lars_symptoms
from .demo import (
    MiB,
    SimulatedMemory,
    TrainStep,
    budgeted,
    known_cost_steps,
    largest_batch_cuda,
    lr_per_step,
    make_step,
    simulated_steps,
)
from .lars import ReferenceLAMB, ReferenceLARS
from .lars_check import check_trust_ratio
from .lars_choice import check_optimizer_choice, reference_choose_optimizer
from .lars_demo import (
    large_batch_race,
    plot_race,
    race_setup,
    race_table,
    race_target,
    race_verdict,
)
from .lr_check import check_lr_schedule
from .reference import (
    reference_largest_batch,
    reference_lr_schedule,
    reference_noise_scale,
    reference_sweep,
)
from .regression import (
    DEMO,
    NoisyRegression,
    fit_critical_batch,
    noise_scale_start_and_end,
    plot_critical_batch,
    plot_time_to_target,
    steps_to_target,
    steps_with_schedule,
    time_to_target,
)

__all__ = [
    "DEMO",
    "THRESHOLDS",
    "MiB",
    "NoisyRegression",
    "ReferenceLAMB",
    "ReferenceLARS",
    "SimulatedMemory",
    "ColleagueLARS",
    "TrainStep",
    "budgeted",
    "check_largest_batch",
    "check_lr_schedule",
    "check_noise_scale",
    "check_optimizer_choice",
    "check_throughput_sweep",
    "check_trust_ratio",
    "colleague_schedule",
    "fit_critical_batch",
    "is_out_of_memory",
    "knee",
    "known_cost_steps",
    "large_batch_race",
    "largest_batch_cuda",
    "lars_symptoms",
    "lr_per_step",
    "make_step",
    "noise_scale_start_and_end",
    "plot_critical_batch",
    "plot_race",
    "plot_time_to_target",
    "race_setup",
    "race_table",
    "race_target",
    "race_verdict",
    "reference_choose_optimizer",
    "reference_largest_batch",
    "reference_lr_schedule",
    "reference_noise_scale",
    "reference_sweep",
    "release_cached_memory",
    "simulated_steps",
    "steady_cpu",
    "steps_to_target",
    "steps_with_schedule",
    "time_to_target",
]

# harness functions that compute one of this lesson's answers under another name: the grading
# kernel withholds them (course_utils.grading.kernel_harness). On a CUDA device the demo's own
# probe returns 02-largest-batch's answer; lr_check.factor is the two rules of 02-lr-scaling
# for any step; lars.trust_ratio is LARS's guarded ratio (02-trust-ratio's core; LAMB keeps
# its own, lars.layer_ratio); lars_specimen.simulate replays LARS on the check's specimen.
ANSWERS_ELSEWHERE = (
    "course_utils.lessons.batch_size.demo:largest_batch_cuda",
    "course_utils.lessons.batch_size.lr_check:factor",
    "course_utils.lessons.batch_size.lars:trust_ratio",
    "course_utils.lessons.batch_size.lars_specimen:simulate",
)
