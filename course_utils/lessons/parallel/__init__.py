"""Lesson 16: splitting a layer (tensor parallelism) and splitting the depth (pipeline
parallelism). The model and its layouts (model), collectives counted (comms), Megatron's MLP by
hand (by_hand), the schedules on several processes (pipeline), what the notebook's launch
measures (tensor_demo, worker) and shows (demo); exercise 1's layouts and check (layouts,
checks), exercise 2's jobs and check (jobs, plan_check), exercise 3's (shard_probe,
shard_check); answers in reference and reference_scripts, limits in thresholds."""

from .by_hand import FromParallel, HandBlock, ToParallel
from .checks import THRESHOLDS, check_predict_comms
from .comms import KINDS, Counted, step_comms
from .demo import Demo, bubble_table, on_gpus, plot_timelines, run_demo, tensor_table, workdir
from .jobs import EXAMPLE, Job
from .layouts import measured_comms
from .model import STYLES, Block, Layout, Net, parallelize
from .pipeline import LiveBytes, Stage, predicted_bubble, run_schedules
from .plan_check import check_choose_parallel
from .reference import reference_choose_parallel, reference_predict_comms
from .shard_check import check_shard

__all__ = [
    "EXAMPLE",
    "KINDS",
    "STYLES",
    "THRESHOLDS",
    "Block",
    "Counted",
    "Demo",
    "FromParallel",
    "HandBlock",
    "Job",
    "Layout",
    "LiveBytes",
    "Net",
    "Stage",
    "ToParallel",
    "bubble_table",
    "check_choose_parallel",
    "check_predict_comms",
    "check_shard",
    "measured_comms",
    "on_gpus",
    "parallelize",
    "plot_timelines",
    "predicted_bubble",
    "reference_choose_parallel",
    "reference_predict_comms",
    "run_demo",
    "run_schedules",
    "step_comms",
    "tensor_table",
    "workdir",
]

# harness functions that compute an exercise's answer under another name: the grading kernel
# withholds them (course_utils.grading.kernel_harness). measured_comms counts exercise 1's
# collectives; memory_bytes, step_parts and step_seconds are the model exercise 2's check
# judges a plan by (in a notebook each refuses to run while the learner's answer runs).
ANSWERS_ELSEWHERE = (
    "course_utils.lessons.parallel.layouts:measured_comms",
    "course_utils.lessons.parallel.jobs:memory_bytes",
    "course_utils.lessons.parallel.jobs:step_parts",
    "course_utils.lessons.parallel.jobs:step_seconds",
)
