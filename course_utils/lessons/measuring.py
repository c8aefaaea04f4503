"""Lesson 00, measuring honestly: a simulated asynchronous device and the three checks.

A CPU runs kernels synchronously, so on a laptop a timer without synchronisation happens to
be right, and a learner could never see the mistake. `device.SimulatedAccelerator` makes
the mistake visible on any machine: like a CUDA stream, it queues work on a background
thread and returns at once, and only `synchronize()` waits for the queue to drain.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import torch
from torch import nn

from ..checks import at_most, check, correct, retry_measure
from ..device import SimulatedAccelerator
from ..measure import activation_bytes, flops, time_fn
from ..models import MLP


def make_async_step(
    step_s: float = 0.03, first_call_s: float = 0.5
) -> tuple[Callable[[], None], Callable[[], None]]:
    """A training step on a SimulatedAccelerator: `step_s` of queued work per call, and an expensive
    first call (as cuDNN autotuning, torch.compile or lazy allocation make it). Returns
    (step, synchronize)."""
    device, calls = SimulatedAccelerator(), [0]

    def step() -> None:
        calls[0] += 1
        device.launch(step_s + (first_call_s if calls[0] == 1 else 0.0))

    return step, device.synchronize


def naive_time(step: Callable[[], None], repeats: int = 10) -> float:
    """How timing usually goes wrong: no warm-up, no synchronisation, a mean."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return sum(times) / len(times)


def reference_time_step(step, synchronize, warmup: int = 3, repeats: int = 10) -> float:
    """The answer to exercise 1, for the demos after it: warm up, sync, time, median."""
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


@check(
    "00-step-timer",
    points=2,
    hint="Call step() a few times before timing (warm-up); call synchronize() before reading "
    "the clock after each step; return the median of the samples, not the mean.",
)
def check_step_timer(time_step):
    step_s = 0.03

    def close_enough(t) -> bool:
        return isinstance(t, float) and abs(t - step_s) <= 0.25 * step_s

    measured = retry_measure(
        lambda: time_step(*make_async_step(step_s, first_call_s=0.6)), ok=close_enough
    )
    parts = [
        correct(
            "async step",
            close_enough(measured),
            f"a step that queues {step_s * 1e3:.0f} ms of work (first call +600 ms) timed at "
            f"{_ms(measured)} by your timer; expected {step_s * 1e3:.0f} ms +- 25%",
            value=_num(measured),
            threshold=step_s,
        )
    ]
    # The same timer on a real step of this machine must agree with the harness. The two
    # timers alternate, so a change in machine load hits both alike.
    x, w = torch.randn(512, 512), torch.randn(512, 512)

    def real_step() -> None:
        (x @ w).relu_().sum()

    def disagreement() -> float:
        ratios = []
        for _ in range(5):
            ref = time_fn(real_step, warmup=1, repeats=5, min_sample_s=0).median
            ratios.append(time_step(real_step, lambda: None) / ref)
        return abs(statistics.median(ratios) - 1)

    err = retry_measure(disagreement, ok=lambda e: e <= 0.35)
    parts.append(
        at_most(
            "real step",
            err,
            0.35,
            "relative difference from course_utils.time_fn on a 512x512 matmul",
        )
    )
    return parts


def _ms(value) -> str:
    return f"{value * 1e3:.1f} ms" if isinstance(value, float) else repr(value)


def _num(value) -> float | None:
    return value if isinstance(value, float) else None


class _SavesTwice(nn.Module):
    """x*x saves x twice (as both operands), and a view shares its base's storage."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 64)

    def forward(self, x):
        h = self.fc(x)
        sq = h * h
        return (sq.view(-1, 8, 8) * 2).sum()


def activation_cases() -> dict[str, Callable[[], torch.Tensor]]:
    """Forward passes whose saved-for-backward bytes the check compares."""
    torch.manual_seed(0)
    mlp, twice = MLP(dim=128, hidden=256, depth=3), _SavesTwice()
    x_mlp, x_twice = torch.randn(32, 128), torch.randn(16, 64)
    return {
        "MLP(128->256 x3), batch 32": lambda: mlp(x_mlp).sum(),
        "x*x and a view, batch 16": lambda: twice(x_twice),
    }


@check(
    "00-activation-bytes",
    points=2,
    hint="Use torch.autograd.graph.saved_tensors_hooks(pack, unpack); in pack, skip tensors that "
    "are leaves requiring grad (parameters) and count each storage once "
    "(t.untyped_storage().data_ptr() as key, .nbytes() as size).",
)
def check_activation_bytes(saved_bytes):
    parts = []
    for name, forward in activation_cases().items():
        expected = activation_bytes(forward)
        got = saved_bytes(forward)
        parts.append(
            correct(
                name,
                got == expected,
                f"you counted {got!r} bytes saved for backward; the harness counts {expected:,}",
                value=float(got) if isinstance(got, int | float) else None,
                threshold=float(expected),
            )
        )
    return parts


@check(
    "00-train-flops",
    points=1,
    hint="Forward: 2*B*in*out per Linear. Backward: two more matmuls per layer (gradient of the "
    "weight and of the input), except the first layer: the data does not require grad.",
)
def check_train_flops(mlp_train_flops):
    parts = []
    for batch, dims in [(32, [128, 256, 10]), (8, [64, 512, 512, 3])]:
        model = nn.Sequential(*[nn.Linear(a, b) for a, b in zip(dims, dims[1:], strict=False)])
        x = torch.randn(batch, dims[0])
        counted = flops(lambda model=model, x=x: model(x).sum().backward())
        got = mlp_train_flops(batch, dims)
        parts.append(
            correct(
                f"batch {batch}, dims {dims}",
                got == counted,
                f"you computed {got!r} FLOPs; FlopCounterMode counts {counted:,}",
                value=float(got) if isinstance(got, int | float) else None,
                threshold=float(counted),
            )
        )
    return parts
