"""Lesson 07, exercise 3: the probe that measures each micro-batch configuration on this
device, the budgets the check sets from it, and a made-up probe whose budgets sit exactly on a
plan's peak."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ...device import get_device
from ...measure import steady_cpu, time_fn
from ...memory import cuda_peak_memory, tensor_peak_bytes
from .demo import make_blocks, per_block_forward, plain_forward, train_step


def time_step(step: Callable[[], None], repeats: int = 5) -> float:
    """Median seconds per step, one thread on a CPU, samples of >= 20 ms to even out load."""
    with steady_cpu():
        return time_fn(step, warmup=1, repeats=repeats, min_sample_s=0.02).median


@dataclass(frozen=True)
class Measured:
    """One micro-batch step of the probe's workload: forward + backward, no optimizer."""

    micro_batch: int
    checkpoint: bool
    peak_bytes: int  # peak live tensors (CUDA: max_memory_allocated beyond the start)
    samples_per_s: float


class Probe:
    """`probe(micro_batch, checkpoint)` measures that configuration once and caches it, so a
    plan and its check see the same numbers. `checkpoint=True` checkpoints every block."""

    def __init__(self, depth: int = 4, width: int = 32, repeats: int = 5):
        self.blocks, self.width, self.repeats = (
            make_blocks(depth, width, dropout=0.0),
            width,
            repeats,
        )
        self.cache: dict[tuple[int, bool], Measured] = {}

    def __call__(self, micro_batch: int, checkpoint: bool = False) -> Measured:
        if not isinstance(micro_batch, int) or micro_batch < 1:
            raise ValueError(f"micro_batch must be a positive int, got {micro_batch!r}")
        key = (micro_batch, bool(checkpoint))
        if key not in self.cache:
            self.cache[key] = self._measure(*key)
        return self.cache[key]

    def _measure(self, micro_batch: int, ckpt: bool) -> Measured:
        x = torch.randn(micro_batch, self.width, device=get_device())
        step = train_step(per_block_forward if ckpt else plain_forward, self.blocks, x)
        peak = step_peak_bytes(step, x.device)
        return Measured(micro_batch, ckpt, peak, micro_batch / time_step(step, self.repeats))


def step_peak_bytes(step: Callable[[], None], device: torch.device) -> int:
    """Peak bytes one call of `step()` adds. On CUDA one warm-up call comes first: the first
    matmul allocates cuBLAS's workspace (8 MiB, 32 MiB on Hopper) and the first backward the
    gradients, both kept afterwards, so without it the first configuration probed would be
    charged for them and later ones would not."""
    if device.type == "cuda":
        step()
        return cuda_peak_memory(step, device).extra_bytes
    return tensor_peak_bytes(step)


def plot_plans(probe: Probe, budgets: dict[str, int], chosen: dict[str, tuple], title: str):
    """Every configuration the probe measured (peak MiB, samples/s) and each budget's choice."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.6))
    for ckpt, marker in [(False, "o"), (True, "^")]:
        ms = [m for m in probe.cache.values() if m.checkpoint == ckpt]
        xy = [(m.peak_bytes / 2**20, m.samples_per_s) for m in ms]
        ax.scatter(*zip(*xy, strict=True), marker=marker, label=f"checkpoint={ckpt}")
        for m, point in zip(ms, xy, strict=True):
            ax.annotate(str(m.micro_batch), point, fontsize=7)
    for i, (name, b) in enumerate(budgets.items()):
        ax.axvline(b / 2**20, color=f"C{i + 2}", ls="--", label=f"{name} budget: {chosen[name]}")
    ax.set(xlabel="peak MiB per micro-step", ylabel="samples/s", yscale="log", title=title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


EFFECTIVE_BATCH = 256


def budgets(probe) -> dict[str, int]:
    """A roomy budget (the whole batch fits without checkpointing) and a tight one (only a
    quarter of it does), set from the probe's own measurements on this device."""
    quarter, half = (probe(EFFECTIVE_BATCH // d).peak_bytes for d in (4, 2))
    return {
        "roomy": int(1.2 * probe(EFFECTIVE_BATCH).peak_bytes),
        "tight": (quarter + half) // 2,
    }


class MadeUpProbe:
    """A probe with designed numbers for an effective batch of 12 (divisors 1, 2, 3, 4, 6, 12:
    not all powers of two), so that each shortcut picks a slower plan on some budget:
    checkpointing is 0.6x as fast and keeps about a third, budgets sit exactly on a peak."""

    EFFECTIVE = 12
    PLAIN = {1: (20, 100), 2: (30, 180), 3: (40, 250), 4: (50, 300), 6: (70, 380), 12: (130, 500)}
    BUDGETS = {  # KiB; catches: powers of two, no full batch, < for <=, least memory | never
        # checkpointing, ignoring the budget | "the largest that fits is the fastest"
        "made-up, roomy (exactly the full batch's peak)": 130,
        "made-up, checkpointing needed (exactly its peak)": 48,
        "made-up, a smaller plain batch beats a larger checkpointed one": 75,
    }

    def __call__(self, micro_batch: int, checkpoint: bool = False) -> Measured:
        if micro_batch not in self.PLAIN:
            raise ValueError(f"micro_batch {micro_batch!r} does not divide {self.EFFECTIVE}")
        peak, speed = self.PLAIN[micro_batch]
        if checkpoint:
            peak, speed = {1: 15, 2: 18, 3: 21, 4: 24, 6: 30, 12: 48}[micro_batch], 0.6 * speed
        return Measured(micro_batch, bool(checkpoint), peak * 1024, float(speed))
