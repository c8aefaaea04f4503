"""Which conv or linear output goes straight into a BatchNorm, read from a forward pass: a
lesson helper (`lesson.feeds_bn`) that the notebook hands learners and the references use.

It cannot be read from the order in which modules are registered (a custom block may register
its BN first, or apply it before the conv), so it watches a forward pass: hooks record which
tensor each layer produced and which tensor each BN received.
"""

from __future__ import annotations

import copy

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.modules.conv import _ConvNd
from torch.overrides import TorchFunctionMode


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
