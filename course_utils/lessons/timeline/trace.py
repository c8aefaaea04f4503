"""Reading a PyTorch profiler trace from Python: the Chrome trace JSON that
`prof.export_chrome_trace(path)` (or `tensorboard_trace_handler`) writes, which Perfetto
(https://ui.perfetto.dev) and chrome://tracing draw.

What a CPU trace holds: complete events ("ph": "X") with a start `ts` and a duration `dur` in
microseconds, on a process `pid` and thread `tid`. `cat` says what each is: "cpu_op" for an
operator (aten::addmm, autograd::engine::evaluate_function: ...), "user_annotation" for a
`record_function` range (your phases, `ProfilerStep#N` from `prof.step()`, the DataLoader's
`enumerate(DataLoader)#...__next__`, `Optimizer.step#SGD.step`, and gloo's collectives on
their own threads, `gloo:all_reduce`). A GPU trace adds "kernel", "gpu_memcpy" and
"cuda_runtime" events on streams (https://docs.pytorch.org/docs/stable/profiler.html). A
distributed run's trace says its rank in `distributedInfo`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

STEP = "ProfilerStep#"


@dataclass(frozen=True)
class Event:
    """One complete event: times in microseconds, as the trace writes them."""

    name: str
    cat: str
    tid: int | str
    ts: float
    dur: float

    @property
    def end(self) -> float:
        return self.ts + self.dur


def load(path: str | Path) -> dict:
    """A trace file, as the dict `json.load` gives."""
    return json.loads(Path(path).read_text())


def events(trace: dict) -> list[Event]:
    """The trace's complete events, in time order (ties: the longer first, so a range comes
    before what it contains)."""
    found = [
        Event(e["name"], e.get("cat", ""), e["tid"], float(e["ts"]), float(e["dur"]))
        for e in trace["traceEvents"]
        if e.get("ph") == "X" and "dur" in e and isinstance(e.get("pid"), int)
    ]
    return sorted(found, key=lambda e: (e.ts, -e.dur))


def rank(trace: dict) -> int:
    """The rank that wrote the trace (0 for a single process)."""
    return int(trace.get("distributedInfo", {}).get("rank", 0))


def steps(trace: dict) -> list[Event]:
    """The `ProfilerStep#N` ranges: one per step the schedule recorded."""
    return [e for e in events(trace) if e.name.startswith(STEP)]


def main_thread(trace: dict) -> int | str:
    """The thread that ran the training loop: the one with the ProfilerStep ranges."""
    found = steps(trace)
    if not found:
        raise ValueError("no ProfilerStep# ranges: record with a schedule and call prof.step()")
    return found[0].tid


def threads(trace: dict) -> dict:
    """tid -> how many events each thread has, the main thread first."""
    counts: dict = {}
    for e in events(trace):
        counts[e.tid] = counts.get(e.tid, 0) + 1
    main = main_thread(trace)
    return {main: counts.pop(main), **counts}


def within(outer: Event, inner: Event) -> bool:
    return inner.ts >= outer.ts and inner.end <= outer.end + 1e-3
