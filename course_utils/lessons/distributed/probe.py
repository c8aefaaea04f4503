"""torchrun entry point that measures exercise 2 (gradient accumulation under DDP).

Run by the check as `python -m torch.distributed.run --standalone --nproc_per_node=2 -m
course_utils.lessons.distributed.probe --out R.json FILE...`. For each learner file it
imports `accumulate_gradients`, calls it on a fresh DDP model whose communication hook
counts all-reduces, and compares every rank's gradient with the full-batch gradient computed
in one process. Rank 0 writes one JSON result per file.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

from . import workload

MICRO_BATCHES, MICRO_BATCH = 4, 4  # per rank: 4 micro-batches of 4 samples


def counting_allreduce(state: dict, bucket):  # no annotations: DDP rejects string ones
    """DDP's default all-reduce (mean over ranks), counted: one call per gradient bucket.
    Returns the torch.futures.Future[torch.Tensor] that DDP waits on."""
    state["calls"] += 1
    return default_hooks.allreduce_hook(None, bucket)


def counted_ddp(device: torch.device) -> tuple[DDP, dict]:
    model = DDP(workload.make_model().to(device), device_ids=workload.device_ids(device))
    state = {"calls": 0}
    model.register_comm_hook(state, counting_allreduce)
    return model, state


def micro_batches(rank: int, world: int, device: torch.device) -> tuple[list, tuple]:
    """This rank's micro-batches, and the global batch they are a part of."""
    x, y = workload.make_dataset().tensors
    n = MICRO_BATCHES * MICRO_BATCH
    gx, gy = x[: n * world].to(device), y[: n * world].to(device)
    mine = range(rank * n, (rank + 1) * n, MICRO_BATCH)
    return [(gx[i : i + MICRO_BATCH], gy[i : i + MICRO_BATCH]) for i in mine], (gx, gy)


def flat_grad(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.grad.flatten() for p in model.parameters() if p.grad is not None])


def one_process_grad(batches: list, device: torch.device) -> torch.Tensor:
    """Gradient of the mean loss over `batches` concatenated, in this process alone."""
    model = workload.make_model().to(device)
    x = torch.cat([b[0] for b in batches])
    y = torch.cat([b[1] for b in batches])
    F.cross_entropy(model(x), y).backward()
    return flat_grad(model)


def measure(path: Path, rank: int, world: int, device: torch.device) -> dict:
    result: dict = {"path": str(path), "exception": None}
    spec = importlib.util.spec_from_file_location(f"learner_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    model, counter = counted_ddp(device)
    mine, (gx, gy) = micro_batches(rank, world, device)
    # how many all-reduces one synchronised backward issues (one per gradient bucket)
    F.cross_entropy(model(gx[:4]), gy[:4]).backward()
    result["per_sync"], counter["calls"] = counter["calls"], 0
    model.zero_grad(set_to_none=True)
    try:
        spec.loader.exec_module(module)
        module.accumulate_gradients(model, mine)
    except Exception as exc:  # the learner's code: reported, not raised
        result["exception"] = {"type": type(exc).__name__, "message": str(exc)[:300]}
        return result
    if any(p.grad is None for p in model.parameters()):
        result["exception"] = {"type": "NoGradient", "message": "some .grad is None"}
        return result
    grad = flat_grad(model)
    full = one_process_grad([(gx, gy)], device)
    local = one_process_grad(mine, device)
    result.update(
        allreduces=counter["calls"],
        micro_batches=len(mine),
        diff_full=(grad - full).abs().max().item(),
        diff_unscaled=(grad - len(mine) * full).abs().max().item(),
        diff_local=(grad - local).abs().max().item(),
        scale=full.abs().max().item(),
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("files", type=Path, nargs="+")
    args = parser.parse_args()
    backend, device = workload.backend_and_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    try:
        results = []
        for path in args.files:
            mine = measure(path, rank, world, device)
            gc.collect()  # free this file's DDP model now, on both ranks alike
            everyone = [None] * world
            dist.all_gather_object(everyone, mine)
            results.append({"world": world, "ranks": everyone})
        if rank == 0:
            args.out.write_text(json.dumps(results))
        dist.barrier()  # nobody tears down its connections while a peer still uses them
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
