"""Lesson 00's reference answers: what the checks accept, and what demos use in learner
copies where an exercise is not written yet. Each was verified against the harness
(`time_fn`, `activation_bytes`, `FlopCounterMode`, `key_averages`) by tests/test_lesson_00.py."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch
from torch.profiler import ProfilerActivity, profile

from ...checks import reference


@reference
def reference_time_step(step, synchronize, warmup: int = 3, repeats: int = 10) -> float:
    """Exercise 1: warm up, synchronise, time each call with the device synchronised, median."""
    for _ in range(warmup):
        step()
    synchronize()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        step()
        synchronize()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


@reference
def reference_saved_bytes(forward: Callable[[], object]) -> int:
    """Exercise 2: every storage autograd saves, counted once, parameters (and views of them,
    such as the transposed weight a Linear saves) left out."""
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        base = t if t._base is None else t._base
        if not (base.is_leaf and base.requires_grad):
            storage = t.untyped_storage()
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        forward()
    return sum(seen.values())


@reference
def reference_train_flops(batch: int, dims: list[int]) -> int:
    """Exercise 3: 2*B*in*out forward per Linear, twice that backward (weight and input
    gradients), minus the input gradient of the first layer (the data needs none)."""
    layers = list(zip(dims[:-1], dims[1:], strict=True))
    return sum(6 * batch * a * b for a, b in layers) - 2 * batch * layers[0][0] * layers[0][1]


@reference
def reference_slowest_op(step: Callable[[], None]) -> str:
    """Exercise 4: profile one warmed-up call and name the operator with the most self time,
    summed over all its calls (`key_averages()`), not the total (which includes children)."""
    step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    return max(prof.key_averages(), key=lambda e: e.self_cpu_time_total).key
