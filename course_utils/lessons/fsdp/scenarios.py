"""The models whose plans are measured: the notebook's, and the check's (unseen by the
learner), each with its optimizer and per-rank batch."""

from __future__ import annotations

from .model import Spec

MODELS = {  # name -> (spec, optimizer, per-rank batch)
    "demo": (Spec(width=128, depth=6, classes=10), "adam", 32),
    "deep": (Spec(width=96, depth=8, classes=10, seed=3), "momentum", 16),
    "adam": (Spec(width=112, depth=6, classes=10, seed=4), "adam", 16),
    "wide-head": (Spec(width=64, depth=3, classes=6000, seed=5), "adam", 16),
    # ZeRO-1's greedy gives the head (67,840 elements) to rank 0 and both block weights
    # (65,536 each) to rank 1: rank 1 holds 1.9x rank 0's Adam state; 128 rows of activations
    "rank-1-fullest": (Spec(width=128, depth=1, classes=530, hidden=512, seed=6), "adam", 128),
}


def measure(name: str, device, *, rounds: int, steps: int, peaks: bool = True) -> dict:
    from .options import measure_plans

    spec, optimizer, batch = MODELS[name]
    return measure_plans(spec, optimizer, batch, device, rounds=rounds, steps=steps, peaks=peaks)


def per_rank(name: str, device) -> dict:
    """What each rank holds under each strategy (not only the fullest rank)."""
    import torch.distributed as dist

    from .options import rank_batch
    from .sharding import holdings, train_step, wrap

    spec, optimizer, batch = MODELS[name]
    out = {}
    for strategy in ("ddp", "zero1", "fsdp"):
        module, opt = wrap(spec.build(), strategy, optimizer, device=device)
        train_step(module, opt, rank_batch(spec, batch, device), zero_grad=False)
        mine = holdings(module.module if hasattr(module, "module") else module, opt).to_dict()
        everyone = [None] * dist.get_world_size()
        dist.all_gather_object(everyone, mine)
        out[strategy] = everyone
    return out
