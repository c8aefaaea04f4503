"""Run in every process of a launch: each plan (DDP, ZeRO-1, FSDP2 keeping or resharding the
gathered parameters) on one model, measured: the peak this rank allocates from building the
model through two training steps, what it holds after a step, the all-gathers of one step,
and seconds per step in interleaved rounds (every plan once per round, in turn)."""

from __future__ import annotations

import gc
import statistics
import time

import torch
import torch.distributed as dist

from . import collectives
from .model import Spec
from .peak import PeakBytes, allocated, cpu_counter_reason
from .sharding import holdings, train_step, wrap

PLANS = {  # name -> (strategy, reshard_after_forward)
    "DDP": ("ddp", False),
    "ZeRO-1": ("zero1", False),
    "FSDP2, keep": ("fsdp", False),
    "FSDP2, reshard": ("fsdp", True),
}


def plan_name(strategy: str, reshard: bool) -> str:
    return {v: k for k, v in PLANS.items()}[(strategy, bool(reshard) and strategy == "fsdp")]


def rank_batch(spec: Spec, batch: int, device: torch.device):
    x, y = spec.batch(batch, seed=100 + dist.get_rank())
    return x.to(device), y.to(device)


def measure_plans(
    spec: Spec, optimizer: str, batch: int, device, *, rounds: int, steps: int, peaks=True
):
    """{plan: {peak, holdings, gathers, gathered_bytes, seconds: [...]}}, each the largest
    over the ranks (seconds: rank 0's, the slowest rank sets every rank's pace). Without
    `peaks`: only the all-gathers and the times (what exercise 2's check needs)."""
    built, out = {}, {}
    peaks = peaks and not (device.type == "cpu" and cpu_counter_reason())  # no counter: none
    if peaks:
        warm_up(device)
    for name, (strategy, reshard) in PLANS.items():
        gc.collect()
        before = allocated(device) if peaks else 0
        data = rank_batch(spec, batch, device)
        module, opt = wrap(spec.build(), strategy, optimizer, reshard=reshard, device=device)
        measured = {}
        if peaks:
            for _ in range(2):  # DDP rebuilds its buckets after the first step; states appear
                train_step(module, opt, data)
            with PeakBytes(device, since=before) as peak:  # a steady step, from before the build
                train_step(module, opt, data)
            measured["peak"] = peak.bytes
        collectives.reset()
        train_step(module, opt, data, zero_grad=False)
        counted = collectives.snapshot()
        if peaks:
            model = module.module if hasattr(module, "module") else module
            measured.update(holdings(model, opt).to_dict())
        opt.zero_grad(set_to_none=True)
        measured.update(gathers=counted["calls"], gathered_bytes=counted["bytes"])
        out[name] = _largest(measured)
        built[name] = (module, opt, data)
    times = interleaved(built, rounds=rounds, steps=steps, device=device)
    for name in out:
        out[name]["seconds"] = times[name]
    return out


def warm_up(device) -> None:
    """Every plan once on a small model: the one-off allocations of a process's first DDP,
    ZeRO and FSDP2 step (communication buffers, caches) are not charged to the first plan."""
    spec = Spec(width=16, depth=2, classes=4)
    for strategy, reshard in PLANS.values():
        module, opt = wrap(spec.build(), strategy, "adam", reshard=reshard, device=device)
        for _ in range(2):
            train_step(module, opt, rank_batch(spec, 4, device))


def _largest(values: dict) -> dict:
    """Each figure as the largest over the ranks: the rank that must fit."""
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, values)
    return {k: max(v[k] for v in everyone) for k in values}


def interleaved(built: dict, *, rounds: int, steps: int, device) -> dict[str, list[float]]:
    """Seconds per step of each plan: one warm-up step each, then `rounds` rounds in which
    every plan runs `steps` steps between barriers, in an order that rotates each round."""
    names = list(built)
    for name in names:
        train_step(*built[name])
    samples: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            _sync(device)
            start = time.perf_counter()
            for _ in range(steps):
                train_step(*built[name])
            _sync(device)
            samples[name].append((time.perf_counter() - start) / steps)
    return samples


def _sync(device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    dist.barrier()


def median_seconds(measured: dict) -> dict[str, float]:
    return {name: statistics.median(m["seconds"]) for name, m in measured.items()}
