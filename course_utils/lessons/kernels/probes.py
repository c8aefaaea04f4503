"""Lesson 17's probes: each runs the learner's answer beside the learner's code on inputs it
builds from plain fields (specimens.py, traffic.Shape) and returns what it saw as data; the
checks compute what that must equal themselves."""

from __future__ import annotations

import torch

from ...probes import probe
from .runtime import kernel_device
from .specimens import flash_inputs, softmax_input
from .traffic import COUNTING, Shape


def _on_cpu(value):
    """A tensor moved to the CPU; anything else as it is (the check says what it expected)."""
    return value.cpu() if isinstance(value, torch.Tensor) else value


@probe
def softmax_outputs(softmax, cases: dict[str, dict], seed: int) -> dict:
    """{case: the learner's softmax of that case's input, on the CPU}, each input on the
    device the kernels run on."""
    device = kernel_device()
    return {
        name: _on_cpu(softmax(softmax_input(case, seed).to(device))) for name, case in cases.items()
    }


@probe
def attention_outputs(attention, cases: dict[str, dict], seed: int) -> dict:
    """{case: the learner's attention(q, k, v) of that case's inputs, on the CPU}."""
    device = kernel_device()
    out = {}
    for name, case in cases.items():
        q, k, v = (t.to(device) for t in flash_inputs(case, seed))
        out[name] = _on_cpu(attention(q, k, v))
    return out


@probe
def traffic_predictions(predict_traffic, shapes: list[dict]) -> list:
    """What the learner's predict_traffic returned for each shape (a fresh Shape each); the
    operator counter refuses to run meanwhile (traffic.COUNTING)."""
    COUNTING.append(True)
    try:
        return [predict_traffic(Shape(**fields)) for fields in shapes]
    finally:
        COUNTING.clear()
