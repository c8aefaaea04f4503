"""Biases feeding BatchNorm, found by following the data: one forward of a copy of the
model, with hooks that see which Conv/Linear output a BatchNorm actually receives. A bias
there is cancelled by BatchNorm's mean subtraction (Ioffe & Szegedy 2015), so it is a wasted
parameter and a wasted add. Without captured inputs, consecutive children of Sequentials are
used instead (a module-order heuristic)."""

from __future__ import annotations

import copy

import torch
from torch import nn

from .context import Context
from .findings import Finding

_BIASED = (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.Linear)
_BN = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm)


def _has_bias(m: nn.Module) -> bool:
    return isinstance(m, _BIASED) and getattr(m, "bias", None) is not None


def pairs_by_data_flow(model: nn.Module, args: tuple, kwargs: dict) -> list[tuple[str, str]]:
    """(biased layer, BatchNorm) names where the BatchNorm's input is that layer's output."""
    model = copy.deepcopy(model).eval()
    outputs: dict[int, tuple[str, torch.Tensor]] = {}  # id -> (name, tensor kept alive)
    pairs: list[tuple[str, str]] = []
    handles = []

    def after(name):
        def hook(_m, _inp, out):
            outputs[id(out)] = (name, out)

        return hook

    def before(name):
        def hook(_m, inp):
            seen = outputs.get(id(inp[0])) if inp else None
            if seen is not None and seen[1] is inp[0]:
                pairs.append((seen[0], name))

        return hook

    for name, m in model.named_modules():
        if _has_bias(m):
            handles.append(m.register_forward_hook(after(name)))
        elif isinstance(m, _BN):
            handles.append(m.register_forward_pre_hook(before(name)))
    try:
        with torch.no_grad():
            model(*args, **kwargs)
    finally:
        for h in handles:
            h.remove()
    return pairs


def pairs_by_order(model: nn.Module) -> list[tuple[str, str]]:
    """(biased layer, BatchNorm) names that follow each other inside a Sequential."""
    pairs = []
    for prefix, m in model.named_modules():
        if isinstance(m, nn.Sequential):
            kids = list(m.named_children())
            for (n1, a), (n2, b) in zip(kids, kids[1:], strict=False):
                if _has_bias(a) and isinstance(b, _BN):
                    pairs.append((f"{prefix}.{n1}".lstrip("."), f"{prefix}.{n2}".lstrip(".")))
    return pairs


def bias_before_bn(ctx: Context) -> None:
    model = ctx.base_model
    args, kwargs = ctx.inputs
    how = "data flow of one forward"
    try:
        pairs = pairs_by_data_flow(model, args, kwargs) if args or kwargs else None
    except Exception:  # noqa: BLE001 - a model that cannot run twice: fall back to the order
        pairs = None
    if pairs is None:
        pairs, how = pairs_by_order(model), "module order inside Sequentials"
    if not pairs:
        ctx.ok.append(f"no bias feeding a BatchNorm ({how})")
        return
    modules = dict(model.named_modules())
    wasted = sum(modules[a].bias.numel() for a, _ in pairs)
    names = ", ".join(f"{a}->{b}" for a, b in pairs[:3]) + (" ..." if len(pairs) > 3 else "")
    ctx.add(
        Finding(
            "bias-before-bn",
            "Biases feeding BatchNorm",
            f"{len(pairs)} layers with a bias directly followed by BatchNorm ({names}; by {how}): "
            f"{wasted} parameters that BatchNorm's mean subtraction cancels",
            "bias=False on a Conv/Linear followed by BatchNorm",
            data={"pairs": pairs, "parameters": wasted},
        )
    )
