"""Lesson 17: a fused kernel of your own, in Triton. Where kernels run (runtime), attention
naive and fused with its instruments (attention), what the notebook shows (demo); exercise 1's
and 2's inputs, probes, replays and checks (specimens, probes, replay, checks), exercise 3's
shapes, count and check (traffic, traffic_check); answers in reference and reference_kernels,
limits in thresholds."""

from .attention import MovedBytes, moved_bytes, naive_attention, qkv, sdpa
from .checks import THRESHOLDS, check_flash_forward, check_fused_softmax
from .demo import (
    interpreter_cost,
    memory_table,
    online_softmax_trace,
    operator_table,
    time_on_gpu,
    traffic_table,
)
from .reference import reference_attention, reference_predict_traffic, reference_softmax
from .runtime import interpreted, kernel_device, load_triton
from .specimens import attention_inputs
from .traffic import Shape
from .traffic_check import check_predict_traffic

__all__ = [
    "THRESHOLDS",
    "MovedBytes",
    "attention_inputs",
    "Shape",
    "check_flash_forward",
    "check_fused_softmax",
    "check_predict_traffic",
    "interpreted",
    "interpreter_cost",
    "kernel_device",
    "load_triton",
    "memory_table",
    "moved_bytes",
    "naive_attention",
    "online_softmax_trace",
    "operator_table",
    "qkv",
    "reference_attention",
    "reference_predict_traffic",
    "reference_softmax",
    "sdpa",
    "time_on_gpu",
    "traffic_table",
]

# harness functions that compute an exercise's answer under another name: the grading kernel
# withholds them (course_utils.grading.kernel_harness). traffic.py's counts are exercise 3's
# answer; replay.tiled_attention is exercise 2's in plain torch (its flags left at True).
# MovedBytes, section 1's instrument, stays: it refuses while exercise 3's check runs.
ANSWERS_ELSEWHERE = (
    "course_utils.lessons.kernels.traffic:naive_bytes",
    "course_utils.lessons.kernels.traffic:fused_bytes",
    "course_utils.lessons.kernels.traffic:keys_loaded",
    "course_utils.lessons.kernels.replay:tiled_attention",
)
