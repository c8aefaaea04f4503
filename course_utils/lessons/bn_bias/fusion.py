"""Lesson 09's third check: conv+BN fusion for inference, graded on the custom-block model
(outputs, modes, batch-norm calls), on a model whose channels vary little (where BatchNorm's
eps matters), and by the speed of the fused copy."""

from __future__ import annotations

import copy

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.overrides import TorchFunctionMode

from ...checks import at_least, at_most, check, correct, retry_measure
from ...device import device_class
from . import demo
from .checks import THRESHOLDS, _differ, _outputs

# --- exercise 3: fuse conv+BN for inference -------------------------------------------------


class _CountBatchNorm(TorchFunctionMode):
    """Counts batch-norm calls however they are made (module or functional)."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if "batch_norm" in getattr(func, "__name__", ""):
            self.calls += 1
        return func(*args, **(kwargs or {}))


def batch_norm_calls(model: nn.Module, x: torch.Tensor) -> int:
    counter = _CountBatchNorm()
    with torch.no_grad(), counter:
        model(x)
    return counter.calls


@check(
    "09-fuse",
    points=1,
    hint="Reread section 4: which pairs can fold (a conv whose output reaches only its BN), "
    "what the folded weights and bias are, and which model you may change (the one given "
    "to you is still training). The failing part names what differs: the model you were "
    "given, the copy's mode, an output, or the batch-norm calls left.",
)
def check_fuse(fuse_for_inference):
    model, x = demo.scenario_model(), demo.scenario_input()
    state = copy.deepcopy(model.state_dict())
    want = _outputs(model, x, False)
    fused = fuse_for_inference(model, demo.scenario_input(2))
    same_state = set(state) == set(model.state_dict()) and all(
        torch.equal(v, model.state_dict()[k]) for k, v in state.items()
    )
    not_training = [n or "the model" for n, m in model.named_modules() if not m.training]
    if not same_state:
        said = "your function changed the weights or buffers of the model it was given: fuse a copy (copy.deepcopy)"
    elif not_training:
        said = (
            f"weights untouched, but the model you were given is left in eval mode "
            f"({', '.join(not_training[:3])}): call .eval() on the copy, not on it"
        )
    else:
        said = "unchanged, still in train mode"
    parts = [correct("training model kept", same_state and not not_training, said)]
    # nn.Identity (what a fused BN becomes) and containers (torch.fx makes plain Modules to
    # hold submodules) do the same in either mode
    modeless = (nn.Identity, nn.Sequential, nn.ModuleList, nn.ModuleDict)
    training = [
        n or "the copy"
        for n, m in fused.named_modules()
        if m.training and not isinstance(m, modeless) and type(m) is not nn.Module
    ]
    parts.append(
        correct(
            "eval-mode copy",
            not training,
            "every submodule of the copy is in eval mode"
            if not training
            else f"{len(training)} module(s) of the copy are in train mode ({', '.join(training[:3])}): "
            "call .eval() on the copy (it sets every submodule; .training = False sets one)",
        )
    )
    with torch.no_grad():
        gap = _differ(copy.deepcopy(fused).eval()(x), want)
    parts.append(
        at_most(
            "eval output", gap, THRESHOLDS["output_atol"].value, "largest change of the eval output"
        )
    )
    calls = batch_norm_calls(fused, x)
    parts.append(
        at_most(
            "batch-norm ops left",
            calls,
            THRESHOLDS["bn_ops_left"].value,
            f"batch-norm calls in one forward (the unfused model makes {batch_norm_calls(model.eval(), x)}; "
            "each conv -> BN pair fused removes one)",
        )
    )
    model.train()
    parts += _small_variance_parts(fuse_for_inference)
    if any(p.status == "failed" for p in parts):
        return [*parts, correct("inference speed-up", False, "not measured: fix the fusion first")]
    return [*parts, _fusion_speed(fuse_for_inference)]


def _small_variance_parts(fuse_for_inference) -> list:
    """The fusion of a model whose channels vary little (running_var 1e-5..1e-4), where
    BatchNorm's eps (1e-5) is a large part of running_var + eps: a fusion that leaves eps out
    passes on scenario_model, not here."""
    model, x = demo.small_variance_model(), demo.scenario_input()
    want = _outputs(model, x, False)
    fused = fuse_for_inference(model, demo.scenario_input(2))
    with torch.no_grad():
        got = copy.deepcopy(fused).eval()(x)
    gap = _differ(got, want)
    where = "a conv -> BN model with running variances 1e-5..1e-4"
    output = at_most(
        "eval output, small variances",
        gap,
        THRESHOLDS["output_atol"].value,
        f"largest change of the eval output on {where}",
    )
    if output.status == "failed":
        output.message += _eps_cause(model, x, got)
    calls = batch_norm_calls(fused, x)
    left = at_most(
        "batch-norm ops left, small variances",
        calls,
        THRESHOLDS["small_variance_bn_ops_left"].value,
        f"batch-norm calls in one forward of {where} (its 2 conv -> BN pairs can both fuse)",
    )
    return [output, left]


def _eps_cause(model: nn.Module, x: torch.Tensor, got: torch.Tensor) -> str:
    """Name eps only when the model with eps = 0 in some of its BNs reproduces the output."""
    names = [n for n, m in model.named_modules() if isinstance(m, _BatchNorm)]
    for k in range(1, 2 ** len(names)):
        probe = copy.deepcopy(model).eval()
        dropped = [n for i, n in enumerate(names) if k >> i & 1]
        for n in dropped:
            probe.get_submodule(n).eps = 0.0
        with torch.no_grad():
            if _differ(probe(x), got) <= THRESHOLDS["output_atol"].value:
                return (
                    f" (your output equals this model's with eps left out of BatchNorm "
                    f"{', '.join(dropped)}: a = gamma / sqrt(running_var + eps), and with "
                    "variances this small eps = 1e-5 matters)"
                )
    return " (reread section 4's formula for the folded weights and bias)"


def _fusion_speed(fuse_for_inference):
    torch.manual_seed(0)
    net, x = demo.pointwise_net().eval(), torch.randn(8, 3, 128, 128)
    fused = fuse_for_inference(net, x)
    threshold = THRESHOLDS["fusion_speedup"].value

    def measure() -> float:  # fixed repeats, whatever the mode: the threshold was sized on these
        return demo.inference_comparison(net, fused, x, repeats=10).speedup

    speedup = retry_measure(measure, ok=lambda s: s >= threshold)
    applies = device_class() != "mps"
    return at_least(
        "inference speed-up",
        speedup,
        threshold,
        "fused vs unfused eval forward of a 1x1-conv net (BN is a large share of its time)",
        applies=applies,
        reason="fusion speed on Apple GPUs was not measured for this course",
    )
