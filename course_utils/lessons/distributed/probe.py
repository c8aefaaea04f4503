"""torchrun entry point that measures exercise 2 (gradient accumulation under DDP).

Run by the check's probe as `python -m torch.distributed.run --standalone --nproc_per_node=2 -m
course_utils.lessons.distributed.probe --out R.json [--offset N] FILE...`. For each learner
file it imports `accumulate_gradients` and calls it on a fresh DDP model whose communication
hook counts DDP's all-reduces, while the collectives of `torch.distributed` the learner calls
directly are counted too (patched for the call's duration), on this rank's micro-batches
(gradients.micro_batches). Each rank reports what it counted and the gradient the call left;
rank 0 writes one JSON result per file. The check compares the gradients with the full-batch
gradient and each known mistake's, which it computes itself (gradients.compared).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib.util
import json
import os
from collections import Counter
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d
import torch.nn.functional as F
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
from torch.nn.parallel import DistributedDataParallel as DDP

from . import workload
from .gradients import flat_grad, micro_batches

# collectives a learner might call by hand; those this torch lacks are skipped
COLLECTIVES = ("all_reduce", "all_reduce_coalesced", "reduce", "broadcast", "all_gather",
               "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor",
               "all_to_all", "all_to_all_single")  # fmt: skip
_in_hook = [0]  # > 0 while DDP's hook runs: its own dist.all_reduce is not the learner's


def counting_allreduce(state: dict, bucket):  # no annotations: DDP rejects string ones
    """DDP's default all-reduce (mean over ranks), counted: one call per gradient bucket.
    Returns the torch.futures.Future[torch.Tensor] that DDP waits on."""
    state["calls"] += 1
    _in_hook[0] += 1
    try:
        return default_hooks.allreduce_hook(None, bucket)
    finally:
        _in_hook[0] -= 1


@contextlib.contextmanager
def counting_collectives():
    """Count the calls of torch.distributed's collectives made outside DDP's hook (by the
    learner's code), whether reached as `dist.all_reduce` or imported by name inside."""
    counts: Counter = Counter()
    patched = []
    for name in COLLECTIVES:
        original = getattr(dist, name, None)
        if original is None:
            continue

        def counted(*args, _name=name, _original=original, **kwargs):
            if not _in_hook[0]:
                counts[_name] += 1
            return _original(*args, **kwargs)

        for module in (dist, c10d):
            if getattr(module, name, None) is original:
                setattr(module, name, counted)
                patched.append((module, name, original))
    try:
        yield counts
    finally:
        for module, name, original in patched:
            setattr(module, name, original)


def counted_ddp(device: torch.device) -> tuple[DDP, dict]:
    model = DDP(workload.make_model().to(device), device_ids=workload.device_ids(device))
    state = {"calls": 0}
    model.register_comm_hook(state, counting_allreduce)
    return model, state


def measure(path: Path, rank: int, world: int, device: torch.device, offset: int = 0) -> dict:
    result: dict = {"path": str(path), "exception": None}
    spec = importlib.util.spec_from_file_location(f"learner_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    model, counter = counted_ddp(device)
    mine, (gx, gy) = micro_batches(rank, world, device, offset)
    # how many all-reduces one synchronised backward issues (one per gradient bucket)
    F.cross_entropy(model(gx[:4]), gy[:4]).backward()
    result["per_sync"], counter["calls"] = counter["calls"], 0
    model.zero_grad(set_to_none=True)
    with counting_collectives() as own:
        try:
            spec.loader.exec_module(module)
            module.accumulate_gradients(model, mine)
        except Exception as exc:  # the learner's code: reported, not raised
            result["exception"] = {"type": type(exc).__name__, "message": str(exc)[:300]}
            return result
    if any(p.grad is None for p in model.parameters()):
        result["exception"] = {"type": "NoGradient", "message": "some .grad is None"}
        return result
    result.update(
        allreduces=counter["calls"],
        own_collectives=dict(own),
        parameters=sum(1 for _ in model.parameters()),
        micro_batches=len(mine),
        grad=flat_grad(model).cpu().tolist(),  # compared by the check (gradients.compared)
    )
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--offset", type=int, default=0)  # where the micro-batches start
    parser.add_argument("files", type=Path, nargs="+")
    args = parser.parse_args()
    backend, device = workload.backend_and_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group(backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    try:
        results = []
        for path in args.files:
            mine = measure(path, rank, world, device, args.offset)
            gc.collect()  # free this file's DDP model now, on both ranks alike
            everyone = [None] * world
            dist.all_gather_object(everyone, mine)
            results.append({"world": world, "offset": args.offset, "ranks": everyone})
        if rank == 0:
            args.out.write_text(json.dumps(results))
        dist.barrier()  # nobody tears down its connections while a peer still uses them
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
