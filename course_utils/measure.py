"""Honest measurements: synchronised, warmed up, repeated, interleaved when compared.

Every result keeps its raw samples and its provenance (device, class, torch version), derives
median and spread from them, and says when the spread is too large to trust (IQR/median >
10%, as torch.utils.benchmark warns).
"""

from __future__ import annotations

import multiprocessing as mp
import statistics
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field

import torch

from .device import env_info, get_device, synchronize

NOISY = 0.10  # IQR / median above which a timing is flagged, as torch.utils.benchmark does


def _quantiles(xs: list[float]) -> tuple[float, float, float]:
    if len(xs) == 1:
        return xs[0], xs[0], xs[0]
    q1, q2, q3 = statistics.quantiles(xs, n=4, method="inclusive")
    return q1, q2, q3


def _fmt_s(s: float) -> str:
    for unit, k in (("s", 1), ("ms", 1e3), ("us", 1e6)):
        if s * k >= 1:
            return f"{s * k:.3g} {unit}"
    return f"{s * 1e9:.3g} ns"


@dataclass
class Timing:
    """Seconds per call of one function: raw samples, with median and IQR derived."""

    samples: list[float]
    label: str = ""
    number: int = 1  # calls averaged inside each sample
    env: dict = field(default_factory=dict)

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def iqr(self) -> float:
        q1, _, q3 = _quantiles(self.samples)
        return q3 - q1

    @property
    def noisy(self) -> bool:
        return self.iqr / self.median > NOISY if self.median > 0 else False

    def to_dict(self) -> dict:
        return {**asdict(self), "median": self.median, "iqr": self.iqr, "noisy": self.noisy}

    def __repr__(self) -> str:
        warn = "  (noisy: IQR > 10% of median)" if self.noisy else ""
        return (
            f"Timing({self.label or 'fn'}: median {_fmt_s(self.median)}, "
            f"IQR {_fmt_s(self.iqr)}, n={len(self.samples)}){warn}"
        )


@dataclass
class Comparison:
    """Baseline vs candidate timed in interleaved pairs; speedup is the median pair ratio."""

    baseline: Timing
    candidate: Timing
    ratios: list[float]  # baseline time / candidate time, one per pair

    @property
    def speedup(self) -> float:
        return statistics.median(self.ratios)

    def to_dict(self) -> dict:
        return {
            "baseline": self.baseline.to_dict(),
            "candidate": self.candidate.to_dict(),
            "ratios": self.ratios,
            "speedup": self.speedup,
        }

    def __repr__(self) -> str:
        return (
            f"Comparison({self.candidate.label or 'candidate'} is {self.speedup:.2f}x "
            f"vs {self.baseline.label or 'baseline'}: {_fmt_s(self.baseline.median)} -> "
            f"{_fmt_s(self.candidate.median)}, {len(self.ratios)} interleaved pairs)"
        )


def _timed(fn: Callable[[], object], device: torch.device, number: int) -> float:
    synchronize(device)
    t0 = time.perf_counter()
    for _ in range(number):
        fn()
    synchronize(device)
    return (time.perf_counter() - t0) / number


def _calibrate(fn: Callable[[], object], device: torch.device, min_sample_s: float) -> int:
    """Calls per sample so one sample lasts at least `min_sample_s` (timer resolution)."""
    once = _timed(fn, device, 1)
    return max(1, int(min_sample_s / max(once, 1e-9)) + 1) if once < min_sample_s else 1


def time_fn(
    fn: Callable[[], object],
    *,
    warmup: int = 3,
    repeats: int = 20,
    device: torch.device | str | None = None,
    label: str = "",
    min_sample_s: float = 1e-3,
) -> Timing:
    """Time `fn()` as the median of `repeats` synchronised samples after `warmup` calls."""
    device = torch.device(device) if device is not None else get_device()
    for _ in range(warmup):
        fn()
    number = _calibrate(fn, device, min_sample_s)
    samples = [_timed(fn, device, number) for _ in range(repeats)]
    return Timing(samples, label=label, number=number, env=env_info(device))


def compare(
    baseline: Callable[[], object],
    candidate: Callable[[], object],
    *,
    warmup: int = 3,
    repeats: int = 20,
    device: torch.device | str | None = None,
    labels: tuple[str, str] = ("baseline", "candidate"),
    min_sample_s: float = 1e-3,
) -> Comparison:
    """Time two functions in interleaved pairs, so load changes hit both alike.

    The order inside a pair alternates (AB, BA, AB, …) so neither side always runs warm.
    """
    device = torch.device(device) if device is not None else get_device()
    for _ in range(warmup):
        baseline()
        candidate()
    n_a = _calibrate(baseline, device, min_sample_s)
    n_b = _calibrate(candidate, device, min_sample_s)
    a, b = [], []
    for i in range(repeats):
        if i % 2 == 0:
            a.append(_timed(baseline, device, n_a))
            b.append(_timed(candidate, device, n_b))
        else:
            b.append(_timed(candidate, device, n_b))
            a.append(_timed(baseline, device, n_a))
    env = env_info(device)
    return Comparison(
        Timing(a, labels[0], n_a, env),
        Timing(b, labels[1], n_b, env),
        [x / y for x, y in zip(a, b, strict=True)],
    )


@dataclass
class Throughput:
    """Samples per second of a step that processes `batch_size` samples per call."""

    timing: Timing
    batch_size: int

    @property
    def samples_per_s(self) -> float:
        return self.batch_size / self.timing.median

    def to_dict(self) -> dict:
        return {
            "timing": self.timing.to_dict(),
            "batch_size": self.batch_size,
            "samples_per_s": self.samples_per_s,
        }

    def __repr__(self) -> str:
        return f"Throughput({self.samples_per_s:,.0f} samples/s at batch {self.batch_size})"


def throughput(fn: Callable[[], object], batch_size: int, **kwargs) -> Throughput:
    """Samples/s of `fn`, one call processing `batch_size` samples (kwargs go to time_fn)."""
    return Throughput(time_fn(fn, **kwargs), batch_size)


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


def flops(fn: Callable[[], object]) -> int:
    """FLOPs of one call of `fn` (forward and backward if it runs both), by FlopCounterMode."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        fn()
    return counter.get_total_flops()


def mfu(flops_per_call: float, seconds_per_call: float, peak_flops_per_s: float) -> float:
    """Model FLOPs utilisation: achieved FLOP/s as a fraction of the device's dense peak."""
    return flops_per_call / seconds_per_call / peak_flops_per_s


@contextmanager
def steady_cpu(threads: int = 1) -> Iterator[None]:
    """On a CPU device, run the block with `threads` intra-op threads, then restore.

    On a CPU shared with other work, PyTorch's threads wait for each other at every
    operator, and one descheduled thread stalls the rest: timings of small steps then jump
    by 10x. One thread is slower at large batches but steady. Does nothing on a GPU.
    """
    if get_device().type != "cpu":
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def knee(values: Mapping[int, float], within: float = 0.1, *, higher_is_better: bool = True) -> int:
    """The smallest setting whose measured value is within `within` of the best one.

    Past it, more of the setting buys at most `within`: the smallest batch reaching
    (1 - within) of the best samples/s (higher is better), or the fewest DataLoader workers
    whose epoch is within (1 + within) of the fastest (lower is better).
    """
    if higher_is_better:
        best = max(values.values())
        return min(k for k, v in values.items() if v >= (1 - within) * best)
    best = min(values.values())
    return min(k for k, v in values.items() if v <= (1 + within) * best)


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
