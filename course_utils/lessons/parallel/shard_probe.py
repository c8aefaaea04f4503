"""Exercise 3, beside the learner's code: import the learner's `shard_block(block, mesh)` from
its file, apply it to the check's block, run one training step on the whole batch, report what
happened. `preflight` does it in this process on a pretend world (what each rank holds, which
collectives, without the right numbers); `grade_file` in each process of a real launch (the
numbers). The check (shard_check.py) compares them with the block whole in one process."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch
import torch.distributed as dist

from ...pretend_world import pretend_world
from .comms import Counted
from .model import Block

WIDTH, HIDDEN, SEED = 24, 64, 7
SHAPE = (3, 5, WIDTH)  # (batch, seq, width): every rank is given the whole batch
WEIGHTS = ("up.weight", "down.weight")


def block() -> Block:
    torch.manual_seed(SEED)
    return Block(WIDTH, HIDDEN, norm=True)


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    """The input, and the weights of the loss sum(output * w): every output element counts."""
    g = torch.Generator().manual_seed(SEED + 1)
    return torch.randn(*SHAPE, generator=g), torch.randn(*SHAPE, generator=g)


def whole_step() -> dict:
    """The block whole in one process: its output and every parameter's gradient."""
    model = block()
    x, w = batch()
    out = model(x)
    (out * w).sum().backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    return {"output": out.detach(), "grads": grads}


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(f"learner_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.shard_block


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


def _full(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def _apply(path: Path, device: torch.device):
    """(the sharded block, the exception the learner's code raised or None)."""
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    model = block().to(device)
    try:
        got = _load(path)(model, mesh)
    except Exception as exc:  # the learner's: reported, not raised
        return model, exc
    return (got if isinstance(got, torch.nn.Module) else model), None


def _step(model, device) -> dict:
    x, w = (t.to(device) for t in batch())
    with Counted() as forward:
        out = model(x)
    with Counted() as backward:
        (_full(out) * w).sum().backward()
    params = dict(model.named_parameters())
    return {
        "output": _full(out).detach().cpu(),
        "grads": {n: _full(p.grad).detach().cpu() for n, p in params.items() if p.grad is not None},
        "held": {n: _local(params[n]).numel() for n in WEIGHTS if n in params},
        "forward": forward.calls,
        "backward": backward.calls,
    }


def _layouts(model) -> dict[str, str]:
    """How each weight is split: a DTensor's placements ("Shard(dim=0)": column-parallel for
    a Linear's (out, in) weight; "Shard(dim=1)": row-parallel), or "whole"."""
    params = dict(model.named_parameters())
    return {
        n: ", ".join(map(repr, params[n].placements))
        if hasattr(params[n], "placements")
        else "whole"
        for n in WEIGHTS
        if n in params
    }


def preflight(path: Path) -> dict:
    """shard_block on rank 0 of a pretend world of 2: what it raised, else each weight's
    elements this rank holds and the collectives of a step (their values are not computed)."""
    with pretend_world(0, 2):
        model, raised = _apply(path, torch.device("cpu"))
        if raised is not None:
            return {"raised": raised}
        try:
            seen = _step(model, torch.device("cpu"))
        except Exception as exc:  # the learner's layout fails in the step: say which it was
            return {"raised": exc, "layouts": _layouts(model)}
    return {"raised": None, "held": seen["held"], "forward": seen["forward"],
            "backward": seen["backward"]}  # fmt: skip


def grade_file(path: Path, device) -> dict:
    """In each process of the launch: the learner's shard_block on the check's block, one
    step; every rank's report gathered (rank 0's result)."""
    model, raised = _apply(path, device)
    mine: dict = {"exception": None}
    if raised is not None:
        mine["exception"] = {"type": type(raised).__name__, "message": str(raised)[:300]}
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, mine)
    if not any(r["exception"] for r in everyone):  # a step only where every rank can take it
        try:
            seen = _step(model, device)
        except Exception as exc:  # the learner's layout fails in the step: on every rank alike
            mine["exception"] = {"type": type(exc).__name__, "message": str(exc)[:300]}
            dist.all_gather_object(everyone, mine)
            return {"ranks": everyone}
        mine.update(
            output=seen["output"].tolist(),
            grads={n: g.tolist() for n, g in seen["grads"].items()},
            held=seen["held"],
            forward=seen["forward"],
            backward=seen["backward"],
        )
        dist.all_gather_object(everyone, mine)
    return {"ranks": everyone}
