"""Counting the all-gathers a process issues, and their bytes.

FSDP2 gathers each group's parameters with one `all_gather_single` (torch >= 2.10; earlier
`all_gather_into_tensor`). Replacing that function in `torch.distributed` with one that
counts, then calls the original, counts every gather FSDP2 makes, whatever the backend.
"""

from __future__ import annotations

import functools

import torch.distributed as dist

COUNT = {"calls": 0, "bytes": 0, "largest": 0}
_NAMES = ("all_gather_single", "all_gather_into_tensor")
_depth = [0]


def _counted(original):
    @functools.wraps(original)
    def gather(output, input, *args, **kwargs):
        if _depth[0] == 0:  # one call, even where one of these calls the other
            size = output.numel() * output.element_size()
            COUNT["calls"] += 1
            COUNT["bytes"] += size
            COUNT["largest"] = max(COUNT["largest"], size)
        _depth[0] += 1
        try:
            return original(output, input, *args, **kwargs)
        finally:
            _depth[0] -= 1

    gather.course_counted = True
    return gather


def install() -> None:
    for name in _NAMES:
        fn = getattr(dist, name, None)
        if fn is not None and not getattr(fn, "course_counted", False):
            setattr(dist, name, _counted(fn))


def reset() -> None:
    COUNT.update(calls=0, bytes=0, largest=0)


def snapshot() -> dict:
    return dict(COUNT)
