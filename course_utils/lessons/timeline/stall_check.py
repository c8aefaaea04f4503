"""Exercise 1's check: name the stall a slow loop's trace shows, and where.

The judge records every specimen itself (loops.py in this process; two-rank ones by one launch
of worker.py), knows the stall it planted, and keeps a recording only where its own reading of
the trace (attribution.scores) puts that stall first by THRESHOLDS["lead"] (a load spike can
hide it: then it records again). The learner's find_stall gets the traces as data; its answer
must name the planted kind, phase and rank.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping

from ...checks import Part, check, correct
from ...probes import observe, specimen_rng
from . import launch, loops
from .attribution import KINDS, breakdown, phases, scores
from .probes import stall_named
from .thresholds import THRESHOLDS
from .trace import events, main_thread, within

# one process: (stall, where it may sit, phase names): the first of each in a notebook
ONE = (("host", (4, 1, 3), (1, 0)), ("data", (0,), (0, 1)), ("compute", (3, 4, 1), (0, 1)))
STRAGGLER_KINDS, STRAGGLER_RANKS, STRAGGLER_AT = ("host", "data"), (1, 0), (4, 1)
COMM_AT = (2, 3)
TWO_RANK_SIZE = {"host": 3.0, "data": 2.0, "communication": 1.0}


def one_process_specimens(rng) -> list[dict]:
    return [
        loops.spec(stall, rng.choice(at), names=rng.choice(names), seed=rng.choice((0, 1, 2)))
        for stall, at, names in ONE
    ]


def two_rank_specimens(rng) -> list[dict]:
    kind = rng.choice(STRAGGLER_KINDS)
    at = 0 if kind == "data" else rng.choice(STRAGGLER_AT)
    straggler = loops.spec(kind, at, names=rng.choice((0, 1)), rank=rng.choice(STRAGGLER_RANKS),
                           seed=3, size=TWO_RANK_SIZE[kind])  # fmt: skip
    comm = loops.spec("communication", rng.choice(COMM_AT), names=rng.choice((1, 0)), seed=4)
    return [straggler, comm]


def planted(loop: dict) -> tuple[str, str, int | None]:
    """(kind, phase name, rank or None for every rank) of a specimen's stall."""
    return loop["stall"], loops.PHASE_SETS[loop["names"]][loop["at"]], loop["rank"]


def lead(traces: list[dict], loop: dict) -> float:
    """How many times the planted stall's seconds exceed the next largest's, as the judge
    reads the traces."""
    kind, phase, rank = planted(loop)
    found = scores(traces)
    mine = found.get((kind, phase, 0 if rank is None else rank), 0.0)
    others = [v for k, v in found.items() if k[:2] != (kind, phase) or (rank is not None and
                                                                         k[2] != rank)]  # fmt: skip
    return mine / max(max(others, default=0.0), 1e-9)


def _as_answer(value) -> tuple[str, str, int] | str:
    """(kind, phase, rank) from the learner's dict, or what is wrong with it."""
    if not isinstance(value, Mapping) or not {"kind", "phase", "rank"} <= set(value):
        return f"find_stall returned {value!r}: return a dict with 'kind', 'phase' and 'rank'"
    kind, phase, rank = value["kind"], value["phase"], value["rank"]
    if kind not in KINDS:
        return f"kind {kind!r} is not one of {', '.join(KINDS)}"
    if not isinstance(phase, str) or isinstance(rank, bool) or not isinstance(rank, int | float):
        return f"phase must be a phase's name and rank a number, got {phase!r} and {rank!r}"
    return kind, phase, int(rank)


def _why(traces: list[dict], loop: dict, said: tuple[str, str, int]) -> str:
    """What the judge's reading of the traces says about the learner's answer."""
    kind, phase, rank = planted(loop)
    s_kind, s_phase, s_rank = said
    by_rank = {r: breakdown(t) for r, t in enumerate(traces)}
    if s_rank not in by_rank:
        return f"there is no rank {s_rank}: the run has {len(traces)}"
    names = {name for name, _ in phases(traces[s_rank])}
    if s_phase not in names:
        main = main_thread(traces[s_rank])
        nested = [e for e in events(traces[s_rank]) if e.tid == main and e.name == s_phase]
        for name, p in phases(traces[s_rank]):
            if nested and within(p, nested[0]):
                return (f"'{s_phase}' is a range inside the phase '{name}': a phase is a range "
                        "directly inside a ProfilerStep")  # fmt: skip
        return f"rank {s_rank}'s steps have no phase '{s_phase}' (they have {', '.join(sorted(names))})"
    parts = by_rank[s_rank]
    split = ", ".join(f"{k} {parts.get((s_phase, k), 0) * 1e3:.0f} ms" for k in KINDS)
    said_line = f"rank {s_rank}'s '{s_phase}' (all its recorded steps): {split}"
    if s_kind == "communication" and rank is not None and kind != "communication":
        late = rank
        extra = by_rank[late].get((phase, kind), 0) - by_rank[s_rank].get((phase, kind), 0)
        return (f"{said_line}; but rank {late} waits far less there: a collective returns on "
                f"every rank once the last one joins it, and rank {late} spent {extra * 1e3:.0f} "
                f"ms more than rank {s_rank} in {kind} time in '{phase}'")  # fmt: skip
    return f"{said_line}; the largest stall of this run sits elsewhere"


def _verdict(name: str, traces: list[dict], loop: dict, value) -> Part:
    said = _as_answer(value)
    if isinstance(said, str):
        return correct(name, False, said)
    kind, phase, rank = planted(loop)
    ok = said[0] == kind and said[1] == phase and (rank is None or said[2] == rank)
    if ok:
        return correct(
            name,
            True,
            f"{kind} time in '{phase}'" + (f" on rank {rank}" if rank is not None else ""),
        )
    return correct(
        name,
        False,
        f"you named {said[0]} time in '{said[1]}' on rank {said[2]}: {_why(traces, loop, said)}",
    )


def _recorded(loops_: list[dict], record) -> list[tuple[dict, list[dict] | None]]:
    """Each loop with traces that show its stall first by the lead, recorded up to
    THRESHOLDS["attempts"] times (None: never shown clearly on this machine now)."""
    need, attempts = THRESHOLDS["lead"].value, int(THRESHOLDS["attempts"].value)
    kept: dict[int, list[dict]] = {}
    for _ in range(attempts):
        todo = [i for i in range(len(loops_)) if i not in kept]
        if not todo:
            break
        for i, traces in zip(todo, record([loops_[i] for i in todo]), strict=True):
            if lead(traces, loops_[i]) >= need:
                kept[i] = traces
    return [(loop, kept.get(i)) for i, loop in enumerate(loops_)]


def _record_one(batch: list[dict]) -> list[list[dict]]:
    return [loops.record_loop(loop) for loop in batch]


def _record_two(batch: list[dict]) -> list[list[dict]]:
    return launch.record_ranks(batch)


def _run_name(i: int, loop: dict, ranks: int) -> str:
    where = "one process" if ranks == 1 else f"{ranks} ranks"
    return f"run {i} ({where}; phases {', '.join(loops.PHASE_SETS[loop['names']])})"


def _part(name: str, loop: dict, traces, value) -> Part:
    if traces is None:
        return correct(
            name, True, "not decidable here: this machine's load hid the planted stall in every "
            "recording",
        )  # fmt: skip
    return _verdict(name, traces, loop, value)


@check(
    "14-find-stall",
    points=3,
    hint="For every phase, ask where its time went: waiting for the next batch, running "
    "operators, waiting in a collective, or none of these (Python between operators). Which "
    "of those would go away if you fixed the loop? On two ranks, when does an all-reduce "
    "return on the rank that arrived first? Reread section 2 and the hints of exercise 1.",
)
def check_find_stall(find_stall) -> list[Part]:
    rng = specimen_rng()
    one, two = one_process_specimens(rng), two_rank_specimens(rng)
    parts = []
    # the first run alone first: an unwritten answer raises at its probe, before the rest
    for batch, record, ranks in (([one[0]], _record_one, 1), (one[1:], _record_one, 1),
                                 (two, _record_two, 2)):  # fmt: skip
        for loop, traces in _recorded(batch, record):
            value = None if traces is None else observe(stall_named, find_stall,
                                                        copy.deepcopy(traces))  # fmt: skip
            parts.append(_part(_run_name(len(parts) + 1, loop, ranks), loop, traces, value))
    return parts
