"""torchrun entry point that measures exercise 2 (gradient accumulation under DDP).

Run by the check as `python -m torch.distributed.run --standalone --nproc_per_node=2 -m
course_utils.lessons.distributed.probe --out R.json FILE...`. For each learner file it
imports `accumulate_gradients`, calls it on a fresh DDP model whose communication hook
counts DDP's all-reduces, while the collectives of `torch.distributed` the learner calls
directly are counted too (patched for the call's duration), and compares every rank's gradient
with the full-batch gradient computed in one process and with what each known mistake leaves
on the same micro-batches (computed here, one micro-batch at a time). Rank 0 writes one JSON
result per file.
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

MICRO_BATCHES, MICRO_BATCH = 4, 4  # per rank: 4 micro-batches of 4 samples


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


def known_mistakes(rank: int, world: int, device: torch.device) -> dict[str, torch.Tensor]:
    """What each known mistake leaves in this rank's .grad, from every rank's micro-batch
    gradients (g[r][i]: rank r's micro-batch i, alone), each loss divided by k as meant:
    `sync_at_j`: micro-batch j (not the last) synchronised, so what accumulated up to it is
    averaged over the ranks and the later ones stay local; `last_only(_unscaled)`: the
    gradients cleared inside the loop (zero_grad per micro-batch), only the last, averaged,
    survives; `world_down`/`world_up`: the mean divided / multiplied by the world size."""
    g = [[one_process_grad([b], device) for b in micro_batches(r, world, device)[0]]
         for r in range(world)]  # fmt: skip
    k = len(g[0])
    full = sum(sum(per_rank) for per_rank in g) / (k * world)
    out = {"world_down": full / world, "world_up": full * world}
    for j in range(k - 1):
        synced = sum(sum(g[r][: j + 1]) for r in range(world)) / world
        out[f"sync_at_{j}"] = (synced + sum(g[rank][j + 1 :])) / k
    last = sum(g[r][-1] for r in range(world)) / world
    out["last_only"], out["last_only_unscaled"] = last / k, last
    return out


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
    grad = flat_grad(model)
    full = one_process_grad([(gx, gy)], device)
    local = one_process_grad(mine, device)
    scale = full.abs().max().item()
    expected = {"unscaled": len(mine) * full, "local": local}
    expected.update(known_mistakes(rank, world, device))
    result.update(
        allreduces=counter["calls"],
        own_collectives=dict(own),
        parameters=sum(1 for _ in model.parameters()),
        micro_batches=len(mine),
        diff_full=(grad - full).abs().max().item(),
        scale=scale,
        # relative error from what each known mistake leaves on these micro-batches
        known={name: (grad - e).abs().max().item() / scale for name, e in expected.items()},
        grad=grad.tolist(),  # compared across ranks by rank 0, then dropped
    )
    return result


def spread(ranks: list[dict]) -> None:
    """Add to each rank's result how far its gradient is from rank 0's (relative to the
    full-batch gradient's scale): after a synchronisation every rank holds the same."""
    grads = [r.pop("grad", None) for r in ranks]
    if any(g is None for g in grads):
        return
    first = torch.tensor(grads[0])
    for r, g in zip(ranks, grads, strict=True):
        r["rank_diff"] = (torch.tensor(g) - first).abs().max().item() / r["scale"]


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
            spread(everyone)
            results.append({"world": world, "ranks": everyone})
        if rank == 0:
            args.out.write_text(json.dumps(results))
        dist.barrier()  # nobody tears down its connections while a peer still uses them
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
