"""Reference answers for lesson 09, checked against torch 2.14 on CPU (cpu-bf16 class).

Which bias feeds a BatchNorm is read from a forward pass (`dataflow.feeds_bn`, a helper the
notebook shows learners), and a perturbed bias that leaves the train-mode output unchanged
confirms it.
"""

from __future__ import annotations

import copy
import statistics

import torch
from torch import nn
from torch.nn.utils.fusion import fuse_conv_bn_eval

from ...checks import reference
from .dataflow import feeds_bn


def _output_ignores_bias(model: nn.Module, name: str, example: torch.Tensor) -> bool:
    """Does the train-mode output stay the same when this layer's bias is moved?"""
    with torch.no_grad():
        before = copy.deepcopy(model).train()(example)
        moved = copy.deepcopy(model).train()
        moved.get_submodule(name).bias.add_(torch.randn_like(moved.get_submodule(name).bias))
        return torch.allclose(moved(example), before, rtol=1e-4, atol=1e-5)


@reference
def reference_remove_redundant_biases(model: nn.Module, example: torch.Tensor) -> nn.Module:
    """Remove (in place) each conv/linear bias that only feeds a BatchNorm; fold it into the
    BN's running mean so eval outputs stay the same too. Returns the model."""
    for name, bn_name in feeds_bn(model, example, train=True).items():
        layer, bn = model.get_submodule(name), model.get_submodule(bn_name)
        if layer.bias is None or not _output_ignores_bias(model, name, example):
            continue
        with torch.no_grad():
            if bn.running_mean is not None:
                bn.running_mean -= layer.bias  # BN(x + b) in eval subtracts a mean that held b
        layer.register_parameter("bias", None)
    return model


@reference
def reference_speed_verdict(ratios: list[float]) -> str:
    """ "faster" / "slower" / "no effect" from interleaved pair ratios (baseline/candidate time).

    An effect is claimed only when three quarters of the pairs agree on its sign: the whole
    interquartile range of the ratios lies above 1 (faster) or below 1 (slower).
    """
    q1, _, q3 = statistics.quantiles(ratios, n=4, method="inclusive")
    if q1 > 1:
        return "faster"
    if q3 < 1:
        return "slower"
    return "no effect"


def _set(root: nn.Module, name: str, module: nn.Module) -> None:
    parent, _, child = name.rpartition(".")
    setattr(root.get_submodule(parent) if parent else root, child, module)


@reference
def reference_fuse_for_inference(model: nn.Module, example: torch.Tensor) -> nn.Module:
    """An eval-mode copy with every conv whose output goes straight into a BN fused with it
    (`fuse_conv_bn_eval`), the BN replaced by Identity. The training model is left as it was."""
    fused = copy.deepcopy(model).eval()
    with torch.no_grad():
        want = fused(example)
    for name, bn_name in feeds_bn(fused, example, train=False).items():
        layer = fused.get_submodule(name)
        if not isinstance(layer, nn.Conv1d | nn.Conv2d | nn.Conv3d):
            continue
        trial = copy.deepcopy(fused)
        _set(trial, name, fuse_conv_bn_eval(layer, fused.get_submodule(bn_name)))
        _set(trial, bn_name, nn.Identity())
        with torch.no_grad():
            if torch.allclose(trial(example), want, rtol=1e-4, atol=1e-5):
                fused = trial  # the conv's output had no other use: fusing changed nothing
    return fused
