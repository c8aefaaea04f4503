"""Where a step's time went, per phase, from its trace alone: exercise 1's answer computed by
the harness (the grading kernel withholds this module: ANSWERS_ELSEWHERE).

Each phase (a `record_function` range directly inside a ProfilerStep, on the main thread) is
split into four kinds of time, which add up to its duration:
- data: inside the DataLoader's `__next__` range (the loop waits for its next batch);
- communication: a collective's operator on the main thread, or the main thread idle while a
  collective is in flight on another thread (gloo's and NCCL's own threads);
- compute: operators running, but those two;
- host: nothing of the above: Python between operators.
"""

from __future__ import annotations

from collections import defaultdict

from .intervals import clip, intersect, merge, subtract, total
from .trace import STEP, Event, events, main_thread, rank, within

DATA = "enumerate(DataLoader)"
COLLECTIVES = ("all_reduce", "allreduce", "all_gather", "allgather", "reduce_scatter",
               "broadcast", "record_param_comms", "nccl:", "gloo:", "c10d::")  # fmt: skip
KINDS = ("data", "host", "compute", "communication")


def is_collective(name: str) -> bool:
    low = name.lower()
    return any(word in low for word in COLLECTIVES)


def phases(trace: dict) -> list[tuple[str, Event]]:
    """(name, range) of every phase of every recorded step, in time order."""
    evs = events(trace)
    main = main_thread(trace)
    ranges = [e for e in evs if e.tid == main and e.cat == "user_annotation"]
    found = []
    for step in (e for e in ranges if e.name.startswith(STEP)):
        inside = [e for e in ranges if e is not step and within(step, e)]
        for e in inside:
            if not any(o is not e and within(o, e) and o.dur > e.dur for o in inside):
                found.append((e.name, e))
    return found


def breakdown(trace: dict) -> dict[tuple[str, str], float]:
    """(phase, kind) -> seconds, summed over the recorded steps."""
    evs = events(trace)
    main = main_thread(trace)
    ops = merge((e.ts, e.end) for e in evs if e.tid == main and e.cat == "cpu_op")
    comm_ops = merge(
        (e.ts, e.end) for e in evs if e.tid == main and e.cat == "cpu_op" and is_collective(e.name)
    )
    data = merge((e.ts, e.end) for e in evs if e.tid == main and e.name.startswith(DATA))
    elsewhere = merge((e.ts, e.end) for e in evs if e.tid != main and is_collective(e.name))
    out: dict[tuple[str, str], float] = defaultdict(float)
    for name, phase in phases(trace):
        whole = [(phase.ts, phase.end)]
        in_data = clip(data, phase.ts, phase.end)
        in_comm_ops = subtract(clip(comm_ops, phase.ts, phase.end), in_data)
        in_ops = subtract(subtract(clip(ops, phase.ts, phase.end), in_data), in_comm_ops)
        idle = subtract(subtract(whole, clip(ops, phase.ts, phase.end)), in_data)
        waiting = intersect(idle, clip(elsewhere, phase.ts, phase.end))
        out[name, "data"] += total(in_data) / 1e6
        out[name, "communication"] += (total(in_comm_ops) + total(waiting)) / 1e6
        out[name, "compute"] += total(in_ops) / 1e6
        out[name, "host"] += (total(idle) - total(waiting)) / 1e6
    return dict(out)


def scores(traces: list[dict]) -> dict[tuple[str, str, int], float]:
    """(kind, phase, rank) -> seconds that removing it would save. Waiting in a collective
    counts only as long as every rank waits: a rank that waits longer waits for a later one,
    whose own extra time is the cause."""
    per_rank = {rank(t): breakdown(t) for t in traces}
    out = {}
    for r, parts in per_rank.items():
        for (phase, kind), seconds in parts.items():
            if kind == "communication":
                seconds = min(p.get((phase, kind), 0.0) for p in per_rank.values())
            out[kind, phase, r] = seconds
    return out


def stall_of(traces: list[dict]) -> dict:
    """{"kind", "phase", "rank"} of the largest stall the traces show."""
    found = scores(traces)
    kind, phase, r = max(found, key=found.get)
    return {"kind": kind, "phase": phase, "rank": r}
