"""Counting the collectives of a step, and their bytes.

`CommDebugMode` (torch.distributed.tensor.debug) sees every collective a process issues: the
ones DTensor issues for `parallelize_module`, and a plain `dist.all_reduce` by hand. It counts
them; `Counted` also keeps each one's kind and size. A collective's size here is the size of
the whole tensor it reduces or assembles: an all-reduce's tensor, an all-gather's output, a
reduce-scatter's input (the larger of what goes in and what comes out), whatever the number
of ranks and however the backend moves it.
"""

from __future__ import annotations

import torch
from torch.distributed.tensor.debug import CommDebugMode
from torch.utils._pytree import tree_flatten

KINDS = ("all_reduce", "all_gather", "reduce_scatter")
_NAMES = {  # substrings of torch's op names -> the kind
    "all_reduce": "all_reduce",
    "allreduce": "all_reduce",
    "all_gather": "all_gather",
    "allgather": "all_gather",
    "reduce_scatter": "reduce_scatter",
}


def kind_of(op) -> str:
    name = str(getattr(op, "_overloadpacket", op))
    return next((kind for key, kind in _NAMES.items() if key in name), name)


class Counted(CommDebugMode):
    """CommDebugMode that also records `calls`: (kind, bytes) of each collective, in order."""

    def __init__(self):
        super().__init__()
        self.calls: list[tuple[str, int]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        before = sum(self.comm_counts.values())
        out = super().__torch_dispatch__(func, types, args, kwargs)
        if out is not NotImplemented and sum(self.comm_counts.values()) > before:
            tensors = [t for t in tree_flatten((args, kwargs or {}, out))[0]
                       if isinstance(t, torch.Tensor)]  # fmt: skip
            size = max((t.numel() * t.element_size() for t in tensors), default=0)
            self.calls.append((kind_of(func), size))
        return out

    def summary(self) -> dict[str, list[int]]:
        """kind -> [calls, total bytes], for the kinds that occurred."""
        out: dict[str, list[int]] = {}
        for kind, size in self.calls:
            calls, total = out.get(kind, [0, 0])
            out[kind] = [calls + 1, total + size]
        return out


def step_comms(model, x: torch.Tensor) -> dict[str, dict[str, list[int]]]:
    """The collectives of one training step of `model` on `x` (forward, then the backward of
    the sum of its output), by phase: {"forward": {kind: [calls, bytes]}, "backward": ...}."""
    with Counted() as forward:
        out = model(x)
    loss = (out.full_tensor() if hasattr(out, "full_tensor") else out).float().sum()
    with Counted() as backward:
        loss.backward()
    return {"forward": forward.summary(), "backward": backward.summary()}
