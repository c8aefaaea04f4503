"""Honest measurements: synchronised, warmed up, repeated, interleaved when compared.

Every result keeps its raw samples and its provenance (device, class, torch version), derives
median and spread from them, and says when the spread is too large to trust (IQR/median >
10%, as torch.utils.benchmark warns).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field

import torch

from .device import env_info, get_device, synchronize
from .guards import lesson_tool

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


@lesson_tool  # one synchronised sample of time_fn: refused with it in lesson 00's exercise 1
def timed(fn: Callable[[], object], device: torch.device, number: int) -> float:
    """Seconds per call of `number` calls of `fn`: the device drained before the clock starts
    and again before it stops, so queued GPU work is billed to these calls, not the next."""
    synchronize(device)
    t0 = time.perf_counter()
    for _ in range(number):
        fn()
    synchronize(device)
    return (time.perf_counter() - t0) / number


def _calibrate(fn: Callable[[], object], device: torch.device, min_sample_s: float) -> int:
    """Calls per sample so one sample lasts at least `min_sample_s` (timer resolution)."""
    once = timed(fn, device, 1)
    return max(1, int(min_sample_s / max(once, 1e-9)) + 1) if once < min_sample_s else 1


@lesson_tool  # lesson 00's exercise 1 builds it: refused to the learner's timer there
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
    with _progress(warmup + repeats, label) as bar:
        for _ in range(warmup):
            fn()
            bar.update()
        number = _calibrate(fn, device, min_sample_s)
        samples = []
        for _ in range(repeats):
            samples.append(timed(fn, device, number))
            bar.update()
    return Timing(samples, label=label, number=number, env=env_info(device))


def _progress(total: int, label: str):
    """A bar shown only once timing has taken 2 s (a silent cell looks hung) and cleared when
    done, so quick timings print nothing."""
    from .progress import tqdm

    return tqdm(total=total, desc=f"timing {label}".rstrip(), leave=False, delay=2.0)


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
    with _progress(warmup + repeats, " vs ".join(labels)) as bar:
        for _ in range(warmup):
            baseline()
            candidate()
            bar.update()
        n_a = _calibrate(baseline, device, min_sample_s)
        n_b = _calibrate(candidate, device, min_sample_s)
        a, b = [], []
        for i in range(repeats):
            if i % 2 == 0:
                a.append(timed(baseline, device, n_a))
                b.append(timed(candidate, device, n_b))
            else:
                b.append(timed(candidate, device, n_b))
                a.append(timed(baseline, device, n_a))
            bar.update()
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
