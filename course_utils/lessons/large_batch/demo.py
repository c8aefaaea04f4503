"""Lesson 02b's workloads for section 1: the LR a scheduler gives at each step, the seconds per
training step at each batch size on this device, and what linear LR scaling with warm-up buys
in time to a target on lesson 02's regression (course_utils.quadratic)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from ...device import get_device
from ...measure import steady_cpu, throughput
from ...progress import tqdm
from ...quadratic import steps_with_schedule
from .lars_demo import race_setup, race_step_model

# --- the learning rate a scheduler gives, step by step --------------------------------------


def lr_per_step(
    make_schedule: Callable,
    base_lr: float | Sequence[float],
    batch_size: int,
    warmup_steps: int,
    steps: int,
    base_batch: int = 256,
) -> list:
    """The LR the optimizer uses at each of `steps` steps, the scheduler stepped per batch.
    `base_lr` a number: one param group, one list; a sequence of numbers: one param group per
    number (each its own initial LR), one list per group."""
    many = isinstance(base_lr, Sequence)
    lrs = [float(x) for x in base_lr] if many else [float(base_lr)]
    groups = [{"params": [torch.zeros(1, requires_grad=True)], "lr": lr} for lr in lrs]
    optimizer = torch.optim.SGD(groups, lr=lrs[0])
    scheduler = make_schedule(optimizer, batch_size, warmup_steps, base_batch)
    if not isinstance(scheduler, torch.optim.lr_scheduler.LRScheduler):
        raise TypeError(
            "expected a torch.optim.lr_scheduler scheduler (e.g. LambdaLR), "
            f"got {type(scheduler).__name__}"
        )
    out: list[list[float]] = [[] for _ in lrs]
    for _ in range(steps):
        for row, group in zip(out, optimizer.param_groups, strict=True):
            row.append(float(group["lr"]))
        optimizer.step()
        scheduler.step()
    return out if many else out[0]


# --- seconds per training step on this device -----------------------------------------------


def _train_step(setup: dict, batch: int, device) -> Callable[[], None]:
    """One training step (forward, backward, SGD update) of the race model at `batch`."""
    model, x = race_step_model(setup, batch)
    model, x = model.to(device), x.to(device)
    y = torch.randint(0, 10, (batch,), generator=torch.Generator().manual_seed(0)).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step() -> None:
        F.cross_entropy(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def seconds_per_step(batch_sizes: Sequence[int]) -> dict[int, float]:
    """The median seconds of one training step (forward, backward, SGD update) of the model
    section 2 races at each batch size, its data already on the device, timed by the harness
    (warm-up, synchronised, median: notebook 00's rules, lesson 02's throughput sweep)."""
    setup, device, out = race_setup(), get_device(), {}
    for b in tqdm(list(batch_sizes), desc="seconds per step", leave=False):
        with steady_cpu():
            out[b] = b / throughput(_train_step(setup, b, device), b, repeats=10).samples_per_s
    return out


# --- what linear scaling buys: time to a target on the regression ----------------------------


def time_to_target(seconds_per_step, base_batch, base_lr, warmup_steps=10):
    """{rule: {batch: (steps, seconds)}}: SGD steps until the regression reaches its target
    under each LR rule, times the seconds per step measured on this device at that batch."""

    def scaled(b):  # Goyal et al. 2017: base LR at step 0, k x base LR from warmup_steps on
        k = b / base_batch
        return lambda t: base_lr * (1 + (k - 1) * min(t, warmup_steps) / warmup_steps)

    rules = {"same LR": lambda b: lambda t: base_lr, "linear scaling + warm-up": scaled}
    out = {}
    for name, rule in tqdm(rules.items(), desc="time to target", leave=False):
        out[name] = {}
        for b, seconds in seconds_per_step.items():
            steps = steps_with_schedule(b, rule(b))  # mean of 8 seeds, inf if one diverges
            out[name][b] = (steps, steps * seconds)  # time = steps x seconds per step
    return out


def plot_time_to_target(results: dict[str, dict[int, tuple[float, float]]]):
    """Seconds to the target against batch size, one line per LR rule (diverged runs: gaps)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for name, runs in results.items():
        b = [k for k, v in runs.items() if math.isfinite(v[1])]
        ax.plot(b, [runs[k][1] for k in b], "o-", label=name)
    ax.set(xscale="log", yscale="log", xlabel="batch size", ylabel="seconds to the target")
    ax.set_title("time to target = steps x seconds per step")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    return fig
