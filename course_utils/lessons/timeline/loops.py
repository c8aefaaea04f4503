"""The training loops whose traces exercise 1 reads: a small MLP trained in named phases
(`record_function`), with one stall planted where a spec says, recorded with a schedule.

A loop is described by plain data (`spec(...)`), so the judge and the learner's kernel build
the same one. Stalls, each the kind of thing that slows real loops:
- "data": the dataset decodes every item on the main thread (num_workers=0), in the loader;
- "host": Python works through the batch's numbers, one by one, between operators;
- "compute": an operator that dominates (an evaluation matmul every step);
- on two ranks (worker.py), the same on one rank only, or a gradient too large to all-reduce
  in the time backward computes ("communication").
Sizes are counted in work, not sleeps, so a faster machine shrinks stall and step alike.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function, schedule

PHASE_SETS = (
    ("load", "forward", "backward", "optimizer", "log"),
    ("fetch", "fwd", "bwd", "update", "metrics"),
)
WAIT, WARMUP, ACTIVE = 1, 1, 3  # the schedule: steps skipped, warmed up, recorded
IN, HIDDEN, CLASSES, BATCH = 128, 256, 10, 32
# work per stall, sized so each leads its trace (THRESHOLDS['lead'])
DECODE_ROUNDS, HOST_ROUNDS, EVAL_ROUNDS, COMM_ROUNDS = 6, 400, 3, 4


def spec(stall: str = "none", at: int = 4, *, names: int = 0, rank: int | None = None,
         seed: int = 0, size: float = 1.0) -> dict:  # fmt: skip
    """A loop as data: the stall's kind, the index of the phase it sits in, the phase names
    (an index into PHASE_SETS), the rank that stalls (None: every rank), a seed, a scale."""
    return {"stall": stall, "at": at, "names": names, "rank": rank, "seed": seed, "size": size}


class Decoding(torch.utils.data.Dataset):
    """Items that cost `rounds` small matmuls each to "decode" (0: free)."""

    def __init__(self, rounds: int, seed: int = 0) -> None:
        self.rounds, self.seed = rounds, seed

    def __len__(self) -> int:
        return 1 << 20

    def __getitem__(self, i: int):
        g = torch.Generator().manual_seed(self.seed * 100_003 + i)
        x = torch.randn(IN, generator=g)
        if self.rounds:
            m = torch.randn(128, 128, generator=g) / 12
            for _ in range(self.rounds):
                m = torch.tanh(m @ m)
            x = x + m[0, 0] * 0  # the decoded item still depends on the work
        return x, i % CLASSES


def host_metrics(values: list[list[float]], rounds: int) -> float:
    """Per-sample metrics in pure Python: a softmax and its entropy, row by row."""
    total = 0.0
    for _ in range(rounds):
        for row in values:
            top = max(row)
            exps = [math.exp(v - top) for v in row]
            z = sum(exps)
            total -= sum(p / z * math.log(p / z + 1e-12) for p in exps)
    return total


def make_model(seed: int = 0, depth: int = 1) -> nn.Module:
    """An MLP: IN -> HIDDEN, `depth` ReLU + HIDDEN layers, -> CLASSES."""
    torch.manual_seed(seed)
    layers = [nn.Linear(IN, HIDDEN)]
    for _ in range(depth - 1):
        layers += [nn.ReLU(), nn.Linear(HIDDEN, HIDDEN)]
    return nn.Sequential(*layers, nn.ReLU(), nn.Linear(HIDDEN, CLASSES))


def planted(loop: dict, rank: int) -> tuple[str, int]:
    """(kind, phase index) of the stall this rank runs, or ("none", -1)."""
    if loop["stall"] == "none" or loop["rank"] not in (None, rank):
        return "none", -1
    return loop["stall"], loop["at"]


def make_step(loop: dict, rank: int = 0, model: nn.Module | None = None,
              wrap: Callable | None = None) -> Callable[[], None]:  # fmt: skip
    """One training step of `loop` on `rank`, each phase a `record_function` range."""
    kind, at = planted(loop, rank)
    size = loop["size"]
    names = PHASE_SETS[loop["names"]]
    net = model if model is not None else make_model(loop["seed"])
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    decode = round(DECODE_ROUNDS * size) if kind == "data" else 0
    data = iter(torch.utils.data.DataLoader(Decoding(decode, loop["seed"] + rank), BATCH))
    g = torch.Generator().manual_seed(loop["seed"])
    big = torch.randn(384, 384, generator=g) / 20

    def stall(phase: int, out: torch.Tensor) -> None:
        if phase != at:
            return
        if kind == "host":
            host_metrics(out.detach()[:8].tolist(), round(HOST_ROUNDS * size))
        elif kind == "compute":
            m = big
            for _ in range(round(EVAL_ROUNDS * size)):
                m = torch.tanh(m @ big)
        elif kind == "communication":  # a colleague's gradient averaging, tensor by tensor
            import torch.distributed as dist

            for _ in range(round(COMM_ROUNDS * size)):
                for p in net.parameters():
                    dist.all_reduce(p.grad)  # blocking: the host waits for every rank

    def step() -> None:
        with record_function(names[0]):
            x, y = next(data)
            stall(0, x)
        with record_function(names[1]):
            out = net(x)
            loss = F.cross_entropy(out, y)
            stall(1, out)
        with record_function(names[2]):
            loss.backward()
            stall(2, out)
        with record_function(names[3]):
            stall(3, out)
            opt.step()
            opt.zero_grad()
        with record_function(names[4]):
            (out.argmax(1) == y).float().mean()
            stall(4, out)

    return step


def record(step: Callable[[], None], steps: int = WAIT + WARMUP + ACTIVE) -> dict:
    """Run `step` under the profiler with schedule(wait, warmup, active) and return the trace
    that on_trace_ready exported, as a dict (what `export_chrome_trace` writes)."""
    import json
    import tempfile
    from pathlib import Path

    got: list[dict] = []

    def ready(prof) -> None:
        with tempfile.TemporaryDirectory(prefix="course14-trace-") as folder:
            path = Path(folder) / "trace.json"
            prof.export_chrome_trace(str(path))
            got.append(json.loads(path.read_text()))

    plan = schedule(wait=WAIT, warmup=WARMUP, active=ACTIVE, repeat=1)
    with profile(activities=[ProfilerActivity.CPU], schedule=plan, on_trace_ready=ready) as prof:
        for _ in range(steps):
            step()
            prof.step()
    return got[-1]


def record_loop(loop: dict) -> list[dict]:
    """The traces of a one-process loop (a list of one), recorded on one thread."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return [slim(record(make_step(loop)))]
    finally:
        torch.set_num_threads(threads)


def slim(trace: dict) -> dict:
    """The trace without what no reading here uses (operators' input shapes and types, flow
    arrows): a tenth of the bytes, so it crosses to a probe quickly."""
    keep = {"ph", "cat", "name", "pid", "tid", "ts", "dur"}
    out = {k: v for k, v in trace.items() if k != "traceEvents"}
    out["traceEvents"] = [
        {k: v for k, v in e.items() if k in keep} for e in trace["traceEvents"]
        if e.get("ph") in ("X", "M")
    ]  # fmt: skip
    return out
