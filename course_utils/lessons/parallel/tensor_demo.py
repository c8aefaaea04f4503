"""What the notebook's launch measures of tensor parallelism, on every rank: one block split
by hand (by_hand.py), by `parallelize_module`, and with sequence parallelism, each against the
same block whole on one process: outputs, gradients, collectives counted, bytes held and saved."""

from __future__ import annotations

import copy

import torch
import torch.distributed as dist

from .comms import step_comms
from .model import Layout, parallelize

DEMO = Layout("megatron", blocks=1, norm=True, batch=4, seq=8, width=64, hidden=256)


def _local(t: torch.Tensor) -> torch.Tensor:
    return t.to_local() if hasattr(t, "to_local") else t


def _full(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor() if hasattr(t, "full_tensor") else t


def held_bytes(model) -> int:
    """Bytes of the parameters this rank holds (a DTensor by its local shard)."""
    return sum(_local(p).numel() * _local(p).element_size() for p in model.parameters())


def saved_bytes(fn) -> int:
    """Bytes autograd saves for backward while `fn()` runs on this rank, each storage once, a
    DTensor by its local shard, parameters (and views of them) left out: cu.activation_bytes,
    for a model whose tensors may be DTensors."""
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        base = t if t._base is None else t._base
        if not (base.is_leaf and base.requires_grad):
            storage = _local(t).untyped_storage()
            seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return sum(seen.values())


def tensor_parallel(device, world: int) -> dict:
    """This rank's view of the three splits of DEMO's block (a dict of plain numbers)."""
    from torch.distributed.device_mesh import init_device_mesh

    from .by_hand import HandBlock

    rank = dist.get_rank()
    mesh = init_device_mesh(device.type, (world,))
    whole = DEMO.build().to(device)
    x = DEMO.batch_tensor().to(device)
    expected = whole(x)
    expected.float().sum().backward()
    out = {"whole_bytes": held_bytes(whole)}
    megatron, sequence = (Layout(s, world=world, **_shape()) for s in ("megatron", "sequence"))
    layouts = {
        "by hand": (lambda: HandBlock(whole.blocks[0]).to(device), megatron),
        "parallelize_module": (lambda: parallelize(copy.deepcopy(whole), megatron, mesh), megatron),
        "sequence parallel": (lambda: parallelize(copy.deepcopy(whole), sequence, mesh), sequence),
    }
    for name, (make, layout) in layouts.items():
        model = make()
        model.zero_grad(set_to_none=True)
        fed = layout.fed(rank).to(device)
        counted = step_comms(model, fed)
        got = model(fed)
        want = expected if layout.style != "sequence" else _mine(expected, rank, world)
        model_for_bytes = make()
        saved = saved_bytes(lambda m=model_for_bytes, x=fed: m(x).float().sum().backward())
        out[name] = {
            "max_diff": float((_full(got) - want).abs().max()),
            "comms": counted,
            "held_bytes": held_bytes(model),
            "saved_bytes": saved,
        }
    return out


def _shape() -> dict:
    return {k: getattr(DEMO, k) for k in ("blocks", "norm", "batch", "seq", "width", "hidden")}


def _mine(t: torch.Tensor, rank: int, world: int) -> torch.Tensor:
    n = t.shape[1] // world
    return t[:, rank * n : (rank + 1) * n]
