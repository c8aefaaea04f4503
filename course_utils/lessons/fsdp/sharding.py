"""Each strategy applied to a model in one process of a group, and what that process holds.

`wrap` turns a plain model into DDP (one full copy per rank), DDP with ZeRO-1's
`ZeroRedundancyOptimizer` (optimizer state partitioned by whole parameters), or FSDP2
(`fully_shard` per block, then on the root: every parameter split on dim 0). `holdings`
counts the bytes of the storages this rank's parameters, gradients and optimizer state use:
each storage once (views share it), a DTensor by its local shard. Nothing is estimated.
"""

from __future__ import annotations

import contextlib
import copy
from dataclasses import asdict, dataclass

import torch
import torch.distributed as dist
from torch import nn

from .model import make_optimizer, optimizer_class, optimizer_kwargs, trainable


@dataclass
class Holdings:
    """Bytes one rank holds, by kind."""

    parameters: int
    gradients: int
    optimizer: int

    @property
    def total(self) -> int:
        return self.parameters + self.gradients + self.optimizer

    def to_dict(self) -> dict:
        return asdict(self)


def local(t: torch.Tensor) -> torch.Tensor:
    """A DTensor's shard on this rank; any other tensor as it is."""
    return t.to_local() if hasattr(t, "to_local") else t


def storage_bytes(tensors) -> int:
    """Bytes of the distinct storages behind `tensors` (a view adds nothing)."""
    seen: dict[int, int] = {}
    for t in tensors:
        if isinstance(t, torch.Tensor):
            s = local(t).untyped_storage()
            seen[s.data_ptr()] = s.nbytes()
    return sum(seen.values())


def optimizer_state(optimizer) -> dict:
    inner = getattr(optimizer, "optim", optimizer)  # ZeroRedundancyOptimizer keeps its shard
    return inner.state


def holdings(model: nn.Module, optimizer) -> Holdings:
    params = list(model.parameters())
    state = optimizer_state(optimizer)
    return Holdings(
        storage_bytes(params),
        storage_bytes(p.grad for p in params if p.grad is not None),
        storage_bytes(v for s in state.values() for v in s.values()),
    )


def _kept_local(state, bucket):  # a world without communication (fake_world): no all-reduce
    future = torch.futures.Future()
    future.set_result(bucket.buffer())
    return future


def shard_blocks(model: nn.Module, reshard: bool = True, mp_policy=None) -> nn.Module:
    """FSDP2 as its documentation recommends: one group per block, then the root (the rest)."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = {"mp_policy": mp_policy or MixedPrecisionPolicy()}
    for block in model.blocks:
        fully_shard(block, reshard_after_forward=reshard, **policy)
    fully_shard(model, **policy)
    return model


def wrap(
    model: nn.Module,
    strategy: str,
    optimizer: str,
    *,
    reshard: bool = True,
    device: torch.device | None = None,
    mp_policy=None,
    communicate: bool = True,
):
    """(the module to call, its optimizer) for `strategy`, in an initialised process group.
    The optimizer is built over the trainable parameters, after wrapping."""
    device = device or torch.device("cpu")
    if strategy in ("ddp", "zero1"):
        from torch.nn.parallel import DistributedDataParallel as DDP

        ids = [device.index] if device.type == "cuda" else None
        module = DDP(model.to(device), device_ids=ids, gradient_as_bucket_view=True)
        if not communicate:
            module.register_comm_hook(None, _kept_local)
        if strategy == "ddp":
            return module, make_optimizer(optimizer, trainable(model))
        from torch.distributed.optim import ZeroRedundancyOptimizer

        zero = ZeroRedundancyOptimizer(
            trainable(model),
            optimizer_class=optimizer_class(optimizer),
            **optimizer_kwargs(optimizer),
        )
        return module, zero
    if strategy != "fsdp":
        raise ValueError(f"strategy must be ddp, zero1 or fsdp, got {strategy!r}")
    shard_blocks(model.to(device), reshard, mp_policy)
    return model, make_optimizer(optimizer, trainable(model))


def train_step(module: nn.Module, optimizer, batch, *, zero_grad: bool = True) -> float:
    x, y = batch
    loss = nn.functional.cross_entropy(module(x).float(), y)
    loss.backward()
    optimizer.step()
    if zero_grad:
        optimizer.zero_grad(set_to_none=True)
    return loss.item()


@contextlib.contextmanager
def fake_world(rank: int, world: int):
    """This process as rank `rank` of `world`, with collectives that move nothing: what each
    rank holds, computed by the real DDP, ZeRO and FSDP2 code, in one process."""
    import sys

    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        raise RuntimeError("this process already belongs to a process group")
    hook = sys.excepthook  # init_process_group chains a "[rankN]:" prefix onto it
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)
    try:
        yield
    finally:
        dist.destroy_process_group()
        sys.excepthook = hook


PREDICTING: list[bool] = []  # set while exercise 1's check runs the learner's prediction


def measured_holdings(spec, strategy: str, optimizer: str, world: int) -> list[Holdings]:
    """What each rank of `world` holds after one training step (gradients not yet zeroed)."""
    if PREDICTING:
        raise RuntimeError(
            "predict_bytes called lesson.measured_holdings: exercise 1 asks for a prediction "
            "from the model's parameters, made before anything is measured"
        )
    ranks = []
    batch = spec.batch(2 * world)
    for rank in range(world):
        with fake_world(rank, world):
            module, opt = wrap(spec.build(), strategy, optimizer, communicate=False)
            train_step(module, opt, batch, zero_grad=False)
            ranks.append(holdings(module.module if hasattr(module, "module") else module, opt))
    return ranks


def fake_peak(model: nn.Module, strategy: str, optimizer: str, batch, world_size: int, *,
              reshard: bool = True, rank: int = 0) -> int:  # fmt: skip
    """Peak bytes rank `rank` of `world_size` would allocate for a steady training step of
    `model` (a copy of it) under `strategy`, measured in this process on a pretend world:
    the real DDP, ZeRO and FSDP2 code allocates what it would, only nothing is sent.
    The same question is measured once per process (the bytes do not depend on the values)."""
    key = (_shape_of(model, batch), strategy, optimizer, world_size, bool(reshard), rank)
    if key not in _PEAKS:
        _PEAKS[key] = _measure_peak(model, strategy, optimizer, batch, world_size, reshard, rank)
    return _PEAKS[key]


_PEAKS: dict = {}


def _shape_of(model: nn.Module, batch) -> tuple:
    """What a step's bytes depend on: the model's class, its tensors' shapes, dtypes and
    which train, and the batch's shapes and dtypes."""
    tensors = [(n, tuple(p.shape), p.dtype, p.requires_grad) for n, p in model.named_parameters()]
    tensors += [(n, tuple(b.shape), b.dtype) for n, b in model.named_buffers()]
    kind = (type(model).__module__, type(model).__qualname__, repr(model))
    return kind, tuple(tensors), tuple((tuple(t.shape), t.dtype) for t in batch)


def _measure_peak(model, strategy, optimizer, batch, world_size, reshard, rank) -> int:
    from .peak import PeakBytes, allocated

    cpu = torch.device("cpu")
    _warm_up(model, batch)
    with fake_world(rank, world_size):
        before = allocated(cpu)
        module, opt = wrap(
            copy.deepcopy(model), strategy, optimizer, reshard=reshard, communicate=False
        )
        # DDP rebuilds its buckets at the second step (both sets alive for a moment); every
        # optimizer has its state after the first
        for _ in range(2 if strategy == "ddp" else 1):
            train_step(module, opt, batch)
        with PeakBytes(cpu, since=before) as peak:
            train_step(module, opt, batch)
        del module, opt
    return peak.bytes


_WARM: set = set()


def _warm_up(model: nn.Module, batch) -> None:
    """Allocations a process makes once and keeps are not a plan's: a process's first DDP
    step allocates tens of MB (measured: 25 MB, whatever the model), and the CPU's matmul
    library caches what it prepared for each new shape (MBs for a wide layer). So every
    strategy runs once on a tiny model, and each model's shapes once, before measuring."""
    from .model import Spec

    if "strategies" not in _WARM:
        spec = Spec(width=8, depth=1, classes=2)
        with fake_world(0, 2):
            for strategy in ("ddp", "zero1", "fsdp"):
                module, opt = wrap(spec.build(), strategy, "adam", communicate=False)
                for _ in range(2):
                    train_step(module, opt, spec.batch(4))
        _WARM.add("strategies")
    key = (tuple(p.shape for p in model.parameters()), tuple(t.shape for t in batch))
    if key not in _WARM:
        copy_ = copy.deepcopy(model)
        for _ in range(2):
            train_step(copy_, make_optimizer("sgd", copy_.parameters()), batch)
        _WARM.add(key)
