"""Whether a function ran a model: the matrix multiplies, convolutions and attention kernels it
dispatched, on any device (the meta device and fake process groups included).

A prediction exercise (00-train-flops, 13-predict-bytes, 16-predict-comms) asks for a number
worked out from shapes; its check compares it with a count the judge makes by running the
model. A function that runs the model itself (under FlopCounterMode, on a pretend world), or
steps an optimizer to see its state, has measured, not predicted: building a model or reading
its parameters' shapes dispatches none of these ops, a forward does. The probe runs the learner's function under ModelRuns; the check
fails a prediction that ran any (`ran_part`).
"""

from __future__ import annotations

from collections import Counter

import torch
from torch.optim.optimizer import register_optimizer_step_pre_hook
from torch.utils._python_dispatch import TorchDispatchMode

from .checks import Part, correct

aten = torch.ops.aten
COMPUTE = frozenset(
    getattr(aten, name)
    for name in (
        "mm",
        "addmm",
        "bmm",
        "baddbmm",
        "convolution",
        "_scaled_dot_product_flash_attention",
        "_scaled_dot_product_flash_attention_for_cpu",
        "_scaled_dot_product_efficient_attention",
        "_scaled_dot_product_cudnn_attention",
    )
    if hasattr(aten, name)
)


class ModelRuns(TorchDispatchMode):
    """`with ModelRuns() as runs: ...`, then `runs.ops`: {op name: calls} of COMPUTE, and
    "Optimizer.step" for each optimizer step taken (a step creates the state a prediction of
    optimizer bytes must work out; counted by a global step pre-hook)."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()
        self._hook = None

    def __enter__(self):
        self._hook = register_optimizer_step_pre_hook(self._stepped)
        return super().__enter__()

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            self._hook.remove()

    def _stepped(self, optimizer, args, kwargs) -> None:
        self.ops["Optimizer.step"] += 1

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.overloadpacket in COMPUTE:
            self.ops[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


def ran_part(ops: dict[str, int]) -> Part:
    """The check's part for the ops a prediction dispatched (`ModelRuns.ops`, as sent)."""
    if not ops:
        return correct("predicted", True, "worked out without running the model")
    listed = ", ".join(
        f"{name if name == 'Optimizer.step' else 'aten.' + name} x{n}"
        for name, n in sorted(ops.items())
    )
    return correct(
        "predicted",
        False,
        f"your function dispatched {listed}: it ran a model or an optimizer, which measures "
        "what this exercise asks you to work out from the shapes (the check runs them itself "
        "to compare). Run them outside your function to test your numbers",
    )
