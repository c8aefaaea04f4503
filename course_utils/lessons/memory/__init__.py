"""Lesson 15: memory and precision levers on lesson 12's GPT. The model restated (model), the
levers and their instruments (levers), a policy as data (policies), float8 formats and tensors
(float8), what the notebook shows (demo); the checks' specimens, probes, replays and checks
(specimens, probes, checks); exercise 2's levers and check (plans, plan_check); answers in reference, limits in thresholds."""

from .checks import THRESHOLDS, check_fp8_scale, check_selective_policy
from .demo import (
    memory_table,
    offload_on_this_device,
    operators_seen,
    plans_table,
    scaling_table,
    step_memory,
    torchao_status,
)
from .float8 import FORMATS, flushed, format_table, gpt_tensors, row_errors
from .levers import held_bytes
from .model import Size
from .plan_check import check_memory_plan
from .plans import measure_plan
from .reference import reference_plan_for, reference_policy, reference_to_float8
from .specimens import SIZES

__all__ = [
    "FORMATS",
    "SIZES",
    "THRESHOLDS",
    "Size",
    "check_fp8_scale",
    "check_memory_plan",
    "check_selective_policy",
    "flushed",
    "format_table",
    "gpt_tensors",
    "held_bytes",
    "measure_plan",
    "memory_table",
    "offload_on_this_device",
    "operators_seen",
    "plans_table",
    "reference_plan_for",
    "reference_policy",
    "reference_to_float8",
    "row_errors",
    "scaling_table",
    "step_memory",
    "torchao_status",
]

# harness functions that compute an exercise's answer under another name: none. The right
# quantizer and its replayed mistakes, and the search for the best plan, are private to the
# checks (the grading kernel strips them); plans.matmuls_saved, exercise 1's answer, stays for
# measure_plan, and exercise 1's probe refuses it as the learner's policy.
ANSWERS_ELSEWHERE = ()
