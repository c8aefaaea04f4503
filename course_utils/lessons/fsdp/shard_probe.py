"""Run in each process of exercise 3's launch: import the learner's `shard_model`, apply it to
a fresh model (in place: the model given is the one trained, whatever it returns), train a few
steps on this rank's half of each global batch, and report this rank's parameters (in full: a
sharded one gathered, a plain one this rank's own copy), the bytes of parameters it holds and
the all-gathers of one step, the largest. The check compares the parameters with one process
training the same model on the whole batches (`one_process`, in the judge)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch
import torch.distributed as dist

from . import collectives
from .model import Spec, loss_of, make_optimizer, trainable
from .sharding import local, storage_bytes

# a head of 96 x 48 (4,704 parameters, 25% of a block's 18,672): a block left in the root's
# group with it is gathered as 1.25x a block, past THRESHOLDS["gather_fraction"]
SPEC = Spec(width=48, depth=3, classes=96, seed=7)
STEPS, GLOBAL_BATCH = 3, 16


def global_batches(device):
    x, y = SPEC.batch(STEPS * GLOBAL_BATCH, seed=11)
    return [(x[i : i + GLOBAL_BATCH].to(device), y[i : i + GLOBAL_BATCH].to(device))
            for i in range(0, len(x), GLOBAL_BATCH)]  # fmt: skip


def one_process(batches) -> list[torch.Tensor]:
    """The parameters of one process training SPEC on the whole batches (SGD-momentum)."""
    model = SPEC.build().to(batches[0][0].device)
    opt = make_optimizer("momentum", trainable(model), lr=0.1)
    for batch in batches:
        loss_of(model, batch).backward()
        opt.step()
        opt.zero_grad()
    return [p.detach() for p in model.parameters()]


def _full(p: torch.Tensor) -> torch.Tensor:
    return p.full_tensor() if hasattr(p, "full_tensor") else p


class _compute_dtypes:
    """The dtypes of the weights each leaf layer computes with, seen in its forward (FSDP2
    gathers them just before: a MixedPrecisionPolicy's param_dtype shows here)."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.seen: set[str] = set()
        leaves = [m for m in model.modules() if next(m.children(), None) is None]
        self.hooks = [m.register_forward_pre_hook(self._saw) for m in leaves]

    def _saw(self, module, args) -> None:
        weight = getattr(module, "weight", None)
        if isinstance(weight, torch.Tensor):
            self.seen.add(str(weight.dtype).removeprefix("torch."))

    def close(self) -> None:
        for hook in self.hooks:
            hook.remove()


def grade_file(path: Path, device) -> dict:
    rank, world = dist.get_rank(), dist.get_world_size()
    mine: dict = {"exception": None}
    spec = importlib.util.spec_from_file_location(f"learner_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    model = SPEC.build()
    try:
        spec.loader.exec_module(module)
        module.shard_model(model)  # in place: what it returns is not trained
    except Exception as exc:  # the learner's code: reported, not raised
        mine["exception"] = {"type": type(exc).__name__, "message": str(exc)[:300]}
    everyone = [None] * world
    dist.all_gather_object(everyone, mine)
    if any(r["exception"] for r in everyone):
        return {"ranks": everyone}
    model.to(device)
    opt = make_optimizer("momentum", trainable(model), lr=0.1)  # linear in the gradient
    batches = global_batches(device)
    share = GLOBAL_BATCH // world
    dtypes = _compute_dtypes(model)
    for i, (x, y) in enumerate(batches):
        if i == len(batches) - 1:
            collectives.reset()
        part = (x[rank * share : (rank + 1) * share], y[rank * share : (rank + 1) * share])
        loss_of(model, part).backward()
        opt.step()
        opt.zero_grad()
    counted = collectives.snapshot()
    dtypes.close()
    params = {n: _full(p).detach().cpu().tolist() for n, p in model.named_parameters()}
    mine.update(
        params=params,  # in named_parameters order
        plain=sorted(n for n, p in model.named_parameters() if not hasattr(p, "to_local")),
        held=storage_bytes(local(p) for p in model.parameters()),
        gathers=counted["calls"],
        largest_gather=counted["largest"],
        compute_dtypes=sorted(dtypes.seen),
    )
    dist.all_gather_object(everyone, mine)
    return {"ranks": everyone}
