"""Run in each process of the notebook's launch: FSDP2's mixed precision policy, and a sharded
checkpoint written with torch.distributed.checkpoint and read back into a fresh model."""

from __future__ import annotations

import statistics
import time
from dataclasses import replace
from pathlib import Path

import torch
import torch.distributed as dist

from . import collectives
from .options import rank_batch
from .scenarios import MODELS
from .sharding import storage_bytes, train_step, wrap


def _policies() -> dict:
    from torch.distributed.fsdp import MixedPrecisionPolicy

    return {
        "float32": MixedPrecisionPolicy(),
        "bf16 compute, fp32 reduce": MixedPrecisionPolicy(
            param_dtype=torch.bfloat16, reduce_dtype=torch.float32
        ),
    }


def mixed_precision(device, rounds: int = 3) -> dict:
    """Per policy: the dtype a block computes in, the dtype the sharded parameters and their
    gradients keep, the bytes all-gathered in one step, and seconds per step."""
    spec, optimizer, batch = MODELS["demo"]
    data = rank_batch(spec, batch, device)
    out, built = {}, {}
    for name, policy in _policies().items():
        model = spec.build()
        seen: dict = {}

        def note(module, args, seen=seen) -> None:  # a pre-hook that returns None keeps args
            seen.setdefault("compute", str(module.weight.dtype))

        model.blocks[0].up.register_forward_pre_hook(note)
        module, opt = wrap(model, "fsdp", optimizer, device=device, mp_policy=policy)
        train_step(module, opt, data)
        collectives.reset()
        train_step(module, opt, data, zero_grad=False)
        first = next(model.parameters())
        out[name] = {
            "compute": seen["compute"].replace("torch.", ""),
            "sharded": str(first.dtype).replace("torch.", ""),
            "gradient": str(first.grad.dtype).replace("torch.", ""),
            "gathered_bytes": collectives.snapshot()["bytes"],
            "seconds": [],
        }
        opt.zero_grad(set_to_none=True)
        built[name] = (module, opt, data)
    for _ in range(rounds):
        for name, args in built.items():
            dist.barrier()
            start = time.perf_counter()
            train_step(*args)
            dist.barrier()
            out[name]["seconds"].append(time.perf_counter() - start)
    for name in out:
        out[name]["median_s"] = statistics.median(out[name]["seconds"])
    return out


def checkpoint_round_trip(device, folder: Path) -> dict:
    """Train 2 steps, save the sharded model state (each rank writes its own shards), load it
    into a fresh model built from another seed, and compare every parameter in full."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, set_model_state_dict

    spec, optimizer, batch = MODELS["demo"]
    model, opt = wrap(spec.build(), "fsdp", optimizer, device=device)
    for _ in range(2):
        train_step(model, opt, rank_batch(spec, batch, device))
    dcp.save(get_model_state_dict(model), checkpoint_id=str(folder))
    fresh, _ = wrap(replace(spec, seed=99).build(), "fsdp", optimizer, device=device)
    before = _max_diff(model, fresh)
    state = get_model_state_dict(fresh)
    dcp.load(state, checkpoint_id=str(folder))
    set_model_state_dict(fresh, state)
    dist.barrier()
    files = {p.name: p.stat().st_size for p in sorted(Path(folder).iterdir())}
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, storage_bytes(model.parameters()))
    return {
        "files": files,
        "shard_bytes": everyone,
        "diff_before": before,
        "diff_after": _max_diff(model, fresh),
    }


def _max_diff(a, b) -> float:
    return max(
        (p.full_tensor() - q.full_tensor()).abs().max().item()
        for p, q in zip(a.parameters(), b.parameters(), strict=True)
    )
