"""The peak memory one rank allocates while a block runs, on a GPU or a CPU.

On CUDA it is the caching allocator's own count (`max_memory_allocated`). A CPU has no such
counter, so on Linux the C library's allocator is asked (glibc's `mallinfo2`: bytes in use,
heap and mmap'd blocks) after every operator torch dispatches: tensors, DDP's buckets and
the buffers FSDP2 gathers into all come from it, and FSDP2's freeing of a gathered
parameter (a storage resized to zero) shows up too, which counting tensors would miss.
The process's resident size is not used: it never goes down and includes the libraries.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc

import torch
from torch.utils._python_dispatch import TorchDispatchMode

_FIELDS = "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost"


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in _FIELDS.split()]


@functools.cache
def _mallinfo2():
    """glibc's mallinfo2 (glibc >= 2.33), or None elsewhere (macOS, Windows, musl)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        fn = libc.mallinfo2
    except (OSError, AttributeError, TypeError):
        return None
    fn.restype = _MallInfo2
    return fn


def cpu_counter_reason() -> str:
    """Why CPU peaks cannot be measured here ('' when they can)."""
    if _mallinfo2() is None:
        return "this C library has no mallinfo2 (CPU peaks need Linux with glibc >= 2.33)"
    return ""


def in_use() -> int:
    if _mallinfo2() is None:
        raise RuntimeError(f"no CPU peak memory here: {cpu_counter_reason()}")
    info = _mallinfo2()()
    return info.uordblks + info.hblkhd


class _Sampler(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.peak = in_use()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.peak = max(self.peak, in_use())
        return out


def allocated(device: torch.device) -> int:
    """Bytes allocated now (after a garbage collection)."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        return torch.cuda.memory_allocated(device)
    return in_use()


class PeakBytes:
    """`with PeakBytes(device, since) as p: ...`; then `p.bytes`: the peak allocated while
    the block ran, above `since` (an earlier `allocated(device)`; default: at the start)."""

    def __init__(self, device: torch.device, since: int | None = None) -> None:
        self.device, self.bytes = device, 0
        self._start = since

    def __enter__(self) -> PeakBytes:
        if self._start is None:
            self._start = allocated(self.device)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            self._sampler = _Sampler().__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.bytes = torch.cuda.max_memory_allocated(self.device) - self._start
        else:
            self._sampler.__exit__(*exc)
            self.bytes = self._sampler.peak - self._start
