"""Reference answers for lesson 09, checked against torch 2.14 on CPU (cpu-bf16 class).

Which bias feeds a BatchNorm cannot be read from the order in which modules are registered
(a custom block may register its BN first, or apply it before the conv), so the reference
watches a forward pass: hooks record which tensor each layer produced and which tensor each
BN received, and a perturbed bias that leaves the train-mode output unchanged confirms it.
"""

from __future__ import annotations

import copy
import statistics

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.modules.conv import _ConvNd
from torch.nn.utils.fusion import fuse_conv_bn_eval
from torch.overrides import TorchFunctionMode

from ...checks import reference


class _Readers(TorchFunctionMode):
    """Every tensor a torch call reads, except inside a BN's own forward (`inside` > 0)."""

    def __init__(self):
        super().__init__()
        self.inside, self.read = 0, []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not self.inside:
            for a in [*args, *kwargs.values()]:
                self.read.extend(t for t in (a if isinstance(a, list | tuple) else [a]))
        return func(*args, **kwargs)


def feeds_bn(model: nn.Module, example: torch.Tensor, *, train: bool) -> dict[str, str]:
    """{layer name: BN name} for every conv/linear whose output tensor a BN receives as input,
    and nothing else reads, in a forward pass in train (or eval) mode. Runs on a copy: BN
    statistics stay untouched. Reads are watched with a TorchFunctionMode, so a second use
    that a later BN hides from the output (a residual sum it normalises) still counts."""
    probe, readers = copy.deepcopy(model).train(train), _Readers()
    produced: dict[int, tuple[str, torch.Tensor]] = {}
    received: dict[str, str] = {}

    def on_output(name):
        def hook(module, args, output):
            produced[id(output)] = (name, output)  # keep the tensor: its id stays unique

        return hook

    def on_input(name):
        def hook(module, args):
            if id(args[0]) in produced:
                received[produced[id(args[0])][0]] = name
            readers.inside += 1

        return hook

    def on_bn_output(module, args, output):
        readers.inside -= 1

    handles = []
    for name, module in probe.named_modules():
        if isinstance(module, _ConvNd | nn.Linear):
            handles.append(module.register_forward_hook(on_output(name)))
        elif isinstance(module, _BatchNorm):
            handles.append(module.register_forward_pre_hook(on_input(name)))
            handles.append(module.register_forward_hook(on_bn_output))
    with torch.no_grad(), readers:
        probe(example)
    for handle in handles:
        handle.remove()
    outputs = {name: out for name, out in produced.values()}
    read_elsewhere = {
        name
        for name in received
        if any(t is outputs[name] for t in readers.read if isinstance(t, torch.Tensor))
    }
    return {name: bn for name, bn in received.items() if name not in read_elsewhere}


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
