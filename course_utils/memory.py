"""Memory: what training holds, measured on any device.

Bytes saved for backward (saved-tensor hooks; any device), the peak of live tensors over
forward and backward (any device), CUDA's own peak, and a CPU process's peak resident set
size in a fresh process (`tracemalloc` does not see torch's allocations).
"""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch

from .device import get_device, synchronize


def _is_weight_copy(base: torch.Tensor) -> bool:
    """True for the output of a cast (`ToCopyBackward0`) of a parameter: autocast's fp16/bf16
    weight copy, which layers save for backward but which does not grow with the batch. The
    autograd graph records it exactly (the cast's input is a parameter's AccumulateGrad), the
    same set autocast caches, on any device and torch version; `weight.half()` counts too."""
    node = base.grad_fn
    if node is None or type(node).__name__ != "ToCopyBackward0":
        return False
    return any(type(n).__name__ == "AccumulateGrad" for n, _ in node.next_functions if n)


def activation_bytes(fn: Callable[[], object], exclude: list[torch.Tensor] | tuple = ()) -> int:
    """Bytes that autograd saves for backward while `fn()` runs.

    Counted once per storage (views share one). Parameters, and views of them such as the
    transposed weight a Linear layer saves, are left out: they exist whether or not we
    train. So are autocast's low-precision weight copies (`_is_weight_copy`): under autocast
    the count is the activations in their autocast dtype. Works on any device.
    """
    skip = {t.untyped_storage().data_ptr() for t in exclude}
    seen: dict[int, int] = {}

    def is_parameter(t: torch.Tensor) -> bool:
        base = t if t._base is None else t._base
        return (base.is_leaf and base.requires_grad) or _is_weight_copy(base)

    def pack(t: torch.Tensor) -> torch.Tensor:
        if not is_parameter(t):
            storage = t.untyped_storage()
            if storage.data_ptr() not in skip:
                seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(seen.values())


@dataclass
class CudaMemory:
    """CUDA memory around one call: allocated before, and the peak while it ran (bytes)."""

    start_bytes: int
    peak_bytes: int

    @property
    def extra_bytes(self) -> int:
        return self.peak_bytes - self.start_bytes

    def to_dict(self) -> dict:
        return {**asdict(self), "extra_bytes": self.extra_bytes}


def cuda_peak_memory(
    fn: Callable[[], object], device: torch.device | str | None = None
) -> CudaMemory:
    """Peak CUDA memory while `fn()` runs: `max_memory_allocated` after a reset."""
    device = torch.device(device) if device is not None else get_device()
    if device.type != "cuda":
        raise ValueError(f"cuda_peak_memory needs a CUDA device, got {device}")
    synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    start = torch.cuda.memory_allocated(device)
    fn()
    synchronize(device)
    return CudaMemory(start, torch.cuda.max_memory_allocated(device))


def _max_rss_bytes() -> int:
    try:
        import resource
        import sys

        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return rss if sys.platform == "darwin" else rss * 1024  # Linux reports KiB
    except ImportError:  # Windows
        import psutil

        return psutil.Process().memory_info().peak_wset


def _rss_child(fn, args, queue) -> None:
    before = _max_rss_bytes()
    fn(*args)
    queue.put((before, _max_rss_bytes()))


@dataclass
class RssPeak:
    """Peak resident memory of a fresh process: after imports, and after running the function."""

    baseline_bytes: int
    peak_bytes: int

    @property
    def extra_bytes(self) -> int:
        return self.peak_bytes - self.baseline_bytes

    def to_dict(self) -> dict:
        return {**asdict(self), "extra_bytes": self.extra_bytes}


def peak_rss(fn: Callable, *args, timeout: float = 300) -> RssPeak:
    """Run `fn(*args)` in a fresh spawned process and report its peak RSS.

    A fresh process is needed because peak RSS never goes down, and tracemalloc does not see
    torch's allocations. `fn` must be importable (defined in a module, not a notebook).
    """
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_rss_child, args=(fn, args, queue))
    proc.start()
    try:
        before, peak = queue.get(timeout=timeout)
    finally:
        proc.join(timeout=10)
        if proc.is_alive():
            proc.kill()
    return RssPeak(before, peak)


def tensor_peak_bytes(fn: Callable[[], object]) -> int:
    """Peak bytes of tensor storages that `fn()` allocates and holds at once, on any device.

    The CPU's stand-in for CUDA's `max_memory_allocated`: it sees the backward pass too, so
    it counts what checkpointing recomputes there, which saved-tensor hooks cannot. Every
    operator's new output storage is counted until it is freed (tracked by weak reference
    and swept before each operator); views and in-place results add nothing. Storages that
    existed before (inputs, parameters) and operators' internal scratch space are left out.
    """
    from torch.multiprocessing.reductions import StorageWeakRef
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    live: dict[int, tuple[StorageWeakRef, int]] = {}  # data_ptr -> (weak ref, bytes)
    usage = {"now": 0, "peak": 0}

    def storages(tree) -> list[torch.UntypedStorage]:
        return [t.untyped_storage() for t in tree_leaves(tree) if isinstance(t, torch.Tensor)]

    class Tracker(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for key in [k for k, (ref, _) in live.items() if ref.expired()]:
                usage["now"] -= live.pop(key)[1]
            inputs = {s.data_ptr() for s in storages((args, kwargs))}
            for storage in storages(out):
                key = storage.data_ptr()
                if key not in inputs and key not in live and storage.nbytes() > 0:
                    live[key] = (StorageWeakRef(storage), storage.nbytes())
                    usage["now"] += storage.nbytes()
            usage["peak"] = max(usage["peak"], usage["now"])
            return out

    with Tracker():
        fn()
    return usage["peak"]
