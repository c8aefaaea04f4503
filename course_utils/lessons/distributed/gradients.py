"""Exercise 2's specimen and what the check compares with: each rank's micro-batches, the
full-batch gradient, each rank's own, and what each known mistake leaves in a rank's .grad.

The ranks of the check's launch (probe.py) build their micro-batches here and report only what
the learner's code left in .grad; the check computes everything below itself, in one process
(no process group: every rank's micro-batches are known from the data set and the offset)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from . import workload

MICRO_BATCHES, MICRO_BATCH = 4, 4  # per rank: 4 micro-batches of 4 samples


def micro_batches(rank: int, world: int, device: torch.device, offset: int = 0):
    """This rank's micro-batches, and the global batch they are a part of: the data set's
    samples from `offset` on, rank r taking the r-th run of MICRO_BATCHES x MICRO_BATCH."""
    x, y = workload.make_dataset().tensors
    n = MICRO_BATCHES * MICRO_BATCH
    gx, gy = x[offset : offset + n * world].to(device), y[offset : offset + n * world].to(device)
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


def known_mistakes(rank: int, world: int, device: torch.device, offset: int = 0) -> dict:
    """What each known mistake leaves in this rank's .grad, from every rank's micro-batch
    gradients (g[r][i]: rank r's micro-batch i, alone), each loss divided by k as meant:
    `sync_at_j`: micro-batch j (not the last) synchronised, so what accumulated up to it is
    averaged over the ranks and the later ones stay local; `last_only(_unscaled)`: the
    gradients cleared inside the loop (zero_grad per micro-batch), only the last, averaged,
    survives; `world_down`/`world_up`: the mean divided / multiplied by the world size."""
    g = [[one_process_grad([b], device) for b in micro_batches(r, world, device, offset)[0]]
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


def compared(ranks: list[dict], offset: int) -> list[dict]:
    """Each rank's report (probe.py: its .grad and its counts) with what the check compares it
    with, computed here: `diff_full` (max |grad - full-batch gradient|), `scale` (max |full|),
    `known` (relative distance to each mistake's gradient) and `rank_diff` (to rank 0's)."""
    cpu, world = torch.device("cpu"), len(ranks)
    out = [dict(r) for r in ranks]
    grads = {}
    for rank, r in enumerate(out):
        grad = r.pop("grad", None)
        if r.get("exception") or grad is None:
            continue
        grad = torch.as_tensor(grad, dtype=torch.float32).flatten()
        mine, (gx, gy) = micro_batches(rank, world, cpu, offset)
        full = one_process_grad([(gx, gy)], cpu)
        if grad.shape != full.shape:
            raise ValueError(
                f"rank {rank} sent a gradient of {grad.numel()} values, not {full.numel()}"
            )
        scale = full.abs().max().item()
        expected = {"unscaled": len(mine) * full, "local": one_process_grad(mine, cpu)}
        expected.update(known_mistakes(rank, world, cpu, offset))
        r.update(
            diff_full=(grad - full).abs().max().item(),
            scale=scale,
            known={name: (grad - e).abs().max().item() / scale for name, e in expected.items()},
        )
        grads[rank] = grad
    if len(grads) == world:
        for rank, r in enumerate(out):
            r["rank_diff"] = (grads[rank] - grads[0]).abs().max().item() / r["scale"]
    return out
