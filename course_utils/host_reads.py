"""Reads of a tensor's value on the host, counted where every one of them passes.

`.item()`, `float(t)`, `t.tolist()` and a Python `if` on a tensor all end in one ATen op,
`aten._local_scalar_dense`: on a GPU each waits for the device to finish (a host-device sync).
Counted under a dispatch mode, they show on a CPU too, where there is no wait to time.
"""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode

_READ = torch.ops.aten._local_scalar_dense.default


class HostReads(TorchDispatchMode):
    """`with HostReads() as reads: ...`, then `reads.count`: the values read on the host."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is _READ:
            self.count += 1
        return func(*args, **(kwargs or {}))
