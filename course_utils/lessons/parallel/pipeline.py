"""Pipeline parallelism with torch.distributed.pipelining, each rank one stage, its timeline
recorded.

A stage's work stands for a device's: every forward of a micro-batch sleeps `forward_s`, every
backward twice that (a backward does about twice a forward's FLOPs), so the timeline shows the
schedule and not this CPU's other processes, and 4 stages run on 2 cores. Between stages the
activations and their gradients really travel (gloo's send/recv, or NCCL's). Autograd's saved
tensors are counted inside each stage's forward as they are saved and freed (`LiveBytes`).
"""

from __future__ import annotations

import time
import weakref

import torch
import torch.distributed as dist
from torch import nn

SCHEDULES = ("GPipe", "1F1B")


class Timeline:
    """What this rank's stage did: ("F" or "B", micro-batch, start s, end s) in order."""

    def __init__(self):
        self.events: list[tuple[str, int, float, float]] = []
        self.forwards = 0

    def clear(self) -> None:
        self.events.clear()
        self.forwards = 0


class DeviceTime(torch.autograd.Function):
    """The identity, taking `seconds` in forward and twice that in backward."""

    @staticmethod
    def forward(ctx, x, seconds: float, timeline: Timeline):
        ctx.seconds, ctx.timeline = seconds, timeline
        ctx.micro_batch = timeline.forwards
        timeline.forwards += 1
        start = time.perf_counter()
        time.sleep(seconds)
        timeline.events.append(("F", ctx.micro_batch, start, time.perf_counter()))
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        start = time.perf_counter()
        time.sleep(2 * ctx.seconds)
        ctx.timeline.events.append(("B", ctx.micro_batch, start, time.perf_counter()))
        return grad, None, None


class LiveBytes:
    """Bytes autograd holds for backward right now, and their peak: each saved tensor's own
    bytes once while anything saved holds it (a micro-batch is a view of the whole batch:
    its rows count, not the batch's); the stage's parameters (and views of them) left out,
    as cu.activation_bytes leaves them out: they are held whatever the schedule."""

    def __init__(self, module: nn.Module):
        self.module = module
        self.reset()

    def reset(self) -> None:
        """Start counting afresh (at a step's start, after the module moved to its device)."""
        self.now = self.peak = 0
        self._holders: dict[tuple, int] = {}  # (address, elements) -> saved tensors holding it
        self._parameters = {p.untyped_storage().data_ptr() for p in self.module.parameters()}

    def pack(self, t: torch.Tensor):
        if t.untyped_storage().data_ptr() in self._parameters:  # a weight: not an activation
            return t
        holder, key = _Held(t), (t.data_ptr(), t.numel())
        size = t.numel() * t.element_size()
        if not self._holders.get(key):
            self.now += size
            self.peak = max(self.peak, self.now)
        self._holders[key] = self._holders.get(key, 0) + 1
        weakref.finalize(holder, self._free, key, size)  # when autograd drops it
        return holder

    def _free(self, key: tuple, size: int) -> None:
        left = self._holders.get(key, 0) - 1
        if left > 0:
            self._holders[key] = left
        elif left == 0:  # (a holder of a step before the last reset: forgotten)
            del self._holders[key]
            self.now -= size

    @staticmethod
    def unpack(holder):
        return holder.tensor if isinstance(holder, _Held) else holder


class _Held:
    def __init__(self, tensor):
        self.tensor = tensor


class Stage(nn.Module):
    """One pipeline stage: two Linear(width, width) + tanh, then a device's worth of time."""

    def __init__(self, width: int, forward_s: float):
        super().__init__()
        self.layers = nn.Sequential(nn.Linear(width, width), nn.Tanh(), nn.Linear(width, width))
        self.forward_s = forward_s
        self.timeline, self.saved = Timeline(), LiveBytes(self)

    def forward(self, x):
        with torch.autograd.graph.saved_tensors_hooks(self.saved.pack, self.saved.unpack):
            return DeviceTime.apply(self.layers(x), self.forward_s, self.timeline)


def schedule(name: str, stage, micro_batches: int, loss_fn):
    from torch.distributed.pipelining import Schedule1F1B, ScheduleGPipe

    kind = {"GPipe": ScheduleGPipe, "1F1B": Schedule1F1B}[name]
    return kind(stage, n_microbatches=micro_batches, loss_fn=loss_fn)


def run_schedules(device, *, micro_batches: list[int], steps: int, forward_s: float,
                  width: int = 256, rows: int = 4) -> list[dict]:  # fmt: skip
    """Every schedule at every number of micro-batches, on this process group (rank i is
    stage i): for each, every rank's timeline of its last step, its idle share of the step,
    the micro-batches it held at once and the peak of its saved bytes. Rank 0's list holds
    them all."""
    from torch.distributed.pipelining import PipelineStage

    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(rank)
    module = Stage(width, forward_s).to(device)
    stage = PipelineStage(module, rank, world, device)
    out = []
    for m in micro_batches:
        for name in SCHEDULES:
            sched = schedule(name, stage, m, _mse)
            g = torch.Generator().manual_seed(m)
            x = torch.randn(rows * m, width, generator=g).to(device)
            y = torch.randn(rows * m, width, generator=g).to(device)
            for _ in range(1 + steps):  # the first step also sets up the stages' buffers
                mine = _one_step(sched, module, device, x, y, rank, world)
            everyone = [None] * world
            dist.all_gather_object(everyone, mine)
            out.append({"schedule": name, "micro_batches": m, "stages": world, "ranks": everyone})
    return out


def _one_step(sched, module: Stage, device, x, y, rank: int, world: int) -> dict:
    module.timeline.clear()
    module.saved.reset()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    dist.barrier()
    start = time.perf_counter()
    if rank == 0:
        sched.step(x)
    elif rank == world - 1:
        sched.step(target=y, losses=[])
    else:
        sched.step()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    end = time.perf_counter()
    wall = torch.tensor([end - start], dtype=torch.float64, device=device)
    dist.all_reduce(wall, op=dist.ReduceOp.MAX)  # the step lasts as long as its slowest rank
    events = [(k, mb, a - start, b - start) for k, mb, a, b in module.timeline.events]
    busy = sum(b - a for _, _, a, b in events)
    return {
        "events": events,
        "wall_s": float(wall.item()),
        "idle": 1 - busy / float(wall.item()),
        "in_flight": in_flight(events),
        "peak_saved": module.saved.peak,
    }


def in_flight(events) -> int:
    """The most micro-batches whose forward had run and backward not yet, at any moment."""
    held = most = 0
    for kind, *_ in sorted(events, key=lambda e: e[2]):
        held += 1 if kind == "F" else -1
        most = max(most, held)
    return most


def _mse(out, target):
    return ((out - target) ** 2).mean()


def predicted_bubble(stages: int, micro_batches: int) -> float:
    """The idle share of a step of `stages` equal stages over `micro_batches` (GPipe and 1F1B
    alike): (p - 1) / (m + p - 1)."""
    return (stages - 1) / (micro_batches + stages - 1)
