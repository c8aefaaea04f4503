"""Lesson 09's probes: each runs the learner's answer on a specimen it builds from plain
arguments, beside the learner's code, and returns what it saw as data (course_utils.probes).
The checks (checks.py, fusion.py) compute what that data must be on their own side. The
specimens and the small instruments both sides use (outputs on a copy, batch-norm calls) are
here, so both build and read them alike."""

from __future__ import annotations

import copy

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from ...device import get_device, synchronize
from ...measure import steady_cpu
from ...models import count_parameters
from ...probes import probe
from . import demo

# --- what both sides build and read ----------------------------------------------------------


def biases(model: nn.Module) -> set[str]:
    """The conv and linear layers that hold a bias parameter."""
    return {
        name
        for name, m in model.named_modules()
        if isinstance(m, nn.Linear | nn.Conv2d) and isinstance(m.bias, nn.Parameter)
    }


def outputs(model: nn.Module, x: torch.Tensor, train: bool) -> torch.Tensor:
    """The output of a copy of `model` in train (or eval) mode: BN statistics stay as they are."""
    with torch.no_grad():
        return copy.deepcopy(model).train(train)(x)


def differ(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max())


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


def fuse_case(specimen: str, seed: int) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """(training model, input the outputs are compared on, the example handed over) of a fusion
    specimen: "scenario" (the custom blocks) or "small variance" (eps matters)."""
    if specimen == "scenario":
        model = demo.scenario_model(seed)
    else:
        model = demo.small_variance_model(seed)
    return model, demo.scenario_input(), demo.scenario_input(2)


def pointwise_case() -> tuple[nn.Module, torch.Tensor]:
    """The net whose fused copy is timed (BN a large share of its time), and its input."""
    torch.manual_seed(0)
    return demo.pointwise_net().eval(), torch.randn(8, 3, 128, 128)


def pointwise_work(model: nn.Module, x: torch.Tensor, seed: int, number: int) -> torch.Tensor:
    """`number` eval forwards of `model`, the i-th on x times a factor drawn from `seed`, and
    each output's per-channel sums, added up (float64, on the CPU): what one timed sample does.
    Every pixel of every forward counts in the sums, and the factors are known only when the
    sample starts, so the sums cannot come from a cache or from part of the work."""
    factors = torch.rand(max(1, number), generator=torch.Generator().manual_seed(seed)) + 0.5
    sums = [model(x * factor).sum(dim=(2, 3)) for factor in factors.tolist()]
    return torch.stack(sums).double().sum(0).cpu()


# --- the probes ----------------------------------------------------------------------------


@probe
def biases_removed(remove_redundant_biases, seed: int, input_seed: int, example_seed: int) -> dict:
    """The learner's removal on scenario_model(seed, downstream_bn=True): which biases are
    left, its parameter count and state after, and its train- and eval-mode outputs on
    scenario_input(input_seed) (each on a copy)."""
    model, x = demo.scenario_model(seed, downstream_bn=True), demo.scenario_input(input_seed)
    result = remove_redundant_biases(model, demo.scenario_input(example_seed))
    model = result if isinstance(result, nn.Module) else model
    return {
        "biases": sorted(biases(model)),
        "n_params": count_parameters(model),
        "state": model.state_dict(),
        "train_out": outputs(model, x, True),
        "eval_out": outputs(model, x, False),
    }


@probe
def verdict_on(speed_verdict, ratios: list[float]):
    """The learner's verdict on one list of pair ratios."""
    return speed_verdict(list(ratios))


# nn.Identity (what a fused BN becomes) and containers (torch.fx makes plain Modules to hold
# submodules) do the same in either mode
MODELESS = (nn.Identity, nn.Sequential, nn.ModuleList, nn.ModuleDict)


@probe
def fused_copy(fuse_for_inference, specimen: str, seed: int) -> dict:
    """The learner's fusion of a fuse_case: the given model's state and the modules it left
    out of train mode, the copy's modules still in train mode (and whether its top module is),
    the copy's eval output, and the batch-norm calls one forward of the copy makes."""
    model, x, example = fuse_case(specimen, seed)
    fused = fuse_for_inference(model, example)
    training = [
        n or "the copy"
        for n, m in fused.named_modules()
        if m.training and not isinstance(m, MODELESS) and type(m) is not nn.Module
    ]
    with torch.no_grad():
        out = copy.deepcopy(fused).eval()(x)
    return {
        "state": model.state_dict(),
        "not_training": [n or "the model" for n, m in model.named_modules() if not m.training],
        "training": training,
        "top_training": bool(fused.training),
        "output": out,
        "bn_calls": batch_norm_calls(fused, x),
    }


_FUSED: dict = {}  # token -> (fused net, input, device): the net a timing fuses once


@probe
def fused_forwards(fuse_for_inference, token: str, seed: int, number: int) -> torch.Tensor:
    """pointwise_work of the learner's fused copy of pointwise_case(), on one thread between
    two synchronisations, for the caller to time and to compare with the unfused net's sums;
    the copy is made on the first call of a `token` (an untimed warm-up)."""
    if token not in _FUSED:
        _FUSED.clear()
        net, x = pointwise_case()
        device = get_device()
        _FUSED[token] = (fuse_for_inference(net, x).to(device).eval(), x.to(device), device)
    fused, x, device = _FUSED[token]
    with torch.no_grad(), steady_cpu(1):
        synchronize(device)
        sums = pointwise_work(fused, x, seed, number)
        synchronize(device)
    return sums
