"""torchrun entry point that measures scaling from 1 to 2 processes, and what no_sync saves.

`python -m torch.distributed.run --standalone --nproc_per_node=2 -m
course_utils.lessons.distributed.bench --out R.json`. In rounds, so a change in machine load
hits every variant alike, it times one optimizer step of a wider MLP on the same global batch:

- `1 process`: rank 0 alone (one thread, or its one GPU) while rank 1 waits at a barrier;
- `1 process, 2 threads`: rank 0 alone with both cores (what you get without DDP); gloo on
  the CPU only: under NCCL the compute runs on a GPU, where CPU threads change nothing;
- `DDP, 2 processes`: both ranks, half the batch each, gradients all-reduced;
- `all-reduce alone`: the communication of one step, without the compute;
- `accumulate` / `accumulate + no_sync`: 4 micro-batches per step, with the all-reduces
  counted by a communication hook; and exercise 2's colleague's version (colleague.py),
  whose gradient is also compared, once, with the full-batch mean gradient.
Rank 0 writes the raw samples (seconds per step), the all-reduce counts and that ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from . import workload
from .colleague import colleague_accumulate
from .probe import counting_allreduce
from .reference import reference_accumulate

WIDTH, DEPTH, CLASSES = 512, 3, 10
COLLEAGUE = "accumulate x4, colleague's"


def flat_grad(model: nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in model.parameters()])


def grad_ratio(ddp: DDP, micro: list, accumulate) -> float:
    """|gradient `accumulate` leaves| / |full-batch mean gradient| (reference_accumulate's)
    on the same micro-batches and weights: 1.0 when it is the mean."""
    grads = []
    for fn in (accumulate, reference_accumulate):
        ddp.zero_grad(set_to_none=True)
        fn(ddp, micro)
        grads.append(flat_grad(ddp))
    ddp.zero_grad(set_to_none=True)
    return (grads[0].norm() / grads[1].norm()).item()


def wide_model() -> nn.Module:
    torch.manual_seed(0)
    layers = [m for _ in range(DEPTH) for m in (nn.Linear(WIDTH, WIDTH), nn.ReLU())]
    return nn.Sequential(*layers, nn.Linear(WIDTH, CLASSES))


def step(model, optimizer, micro_batches, accumulate=None) -> None:
    if accumulate is not None:
        accumulate(model, micro_batches)
    else:
        for x, y in micro_batches:
            (F.cross_entropy(model(x), y) / len(micro_batches)).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def timed(fn, n: int, device) -> float:
    """Seconds per call of `fn`, over n calls, device synchronised."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return (time.perf_counter() - t0) / n


def interleaved(variants: dict, rounds: int) -> dict[str, list[float]]:
    """Seconds of each variant, one sample per round, the variants taking turns within a
    round: a change in the machine's load hits all of them alike. Round 0 pays the one-off
    costs (allocations, DDP's first buckets) and is dropped."""
    samples: dict[str, list[float]] = {name: [] for name in variants}
    for r in range(rounds + 1):
        for name, run in variants.items():
            seconds = run()  # None on the rank that only waited
            if r > 0 and seconds is not None:
                samples[name].append(seconds)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--batch", type=int, default=256, help="global batch")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=3, help="steps per timed sample")
    args = parser.parse_args()
    backend, device = workload.backend_and_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    try:
        result = measure(args, rank, world, device)
        if rank == 0:
            args.out.write_text(json.dumps(result))
        dist.barrier()  # nobody tears down its connections while a peer still uses them
    finally:
        dist.destroy_process_group()


def measure(args, rank: int, world: int, device) -> dict:
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(args.batch, WIDTH, generator=g).to(device)
    y = torch.randint(0, CLASSES, (args.batch,), generator=g).to(device)
    half = args.batch // world
    mine = [(x[:half], y[:half])]
    micro = list(zip(x[:half].chunk(4), y[:half].chunk(4), strict=True))

    single = wide_model().to(device)
    single_opt = torch.optim.SGD(single.parameters(), lr=1e-3)
    ddp = DDP(wide_model().to(device), device_ids=workload.device_ids(device))
    counter = {"calls": 0}
    ddp.register_comm_hook(counter, counting_allreduce)
    ddp_opt = torch.optim.SGD(ddp.parameters(), lr=1e-3)

    def alone(threads: int):
        def run() -> float | None:
            dist.barrier()
            seconds = None
            if rank == 0:  # rank 1 waits at the barrier below: one process does the work
                before = torch.get_num_threads()
                torch.set_num_threads(threads)
                seconds = timed(lambda: step(single, single_opt, [(x, y)]), args.steps, device)
                torch.set_num_threads(before)
            dist.barrier()
            return seconds

        return run

    def together(label: str, batches, accumulate=None):
        def run() -> float:
            dist.barrier()
            counter["calls"] = 0
            seconds = timed(lambda: step(ddp, ddp_opt, batches, accumulate), args.steps, device)
            counts[label] = counter["calls"] / args.steps
            return seconds

        return run

    grads = torch.zeros(sum(p.numel() for p in ddp.parameters()), device=device)

    def all_reduce_alone() -> float:
        dist.barrier()
        return timed(lambda: dist.all_reduce(grads), args.steps, device)

    variants = {
        "1 process": alone(1),
        **({"1 process, 2 threads": alone(2)} if device.type == "cpu" else {}),
        "DDP, 2 processes": together("DDP, 2 processes", mine),
        "all-reduce alone": all_reduce_alone,
        "accumulate x4": together("accumulate x4", micro),
        "accumulate x4 + no_sync": together("accumulate x4 + no_sync", micro, reference_accumulate),
        COLLEAGUE: together(COLLEAGUE, micro, colleague_accumulate),
    }
    counts: dict[str, float] = {}
    samples = interleaved(variants, args.rounds)
    return {
        "colleague_grad_ratio": grad_ratio(ddp, micro, colleague_accumulate),
        "samples": samples,
        "median": {k: statistics.median(v) for k, v in samples.items() if v},
        "allreduces_per_step": counts,
        "batch": args.batch,
        "world": world,
        "backend": dist.get_backend(),
        "device": str(device),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
    }


if __name__ == "__main__":
    main()
