"""The models exercise 1's check predicts for, unseen by the learner: shapes whose rows do
not divide by the world size, a frozen half, a head that dwarfs the rest, a ZeRO-1 partition
whose fullest rank is not rank 0, many small tensors (Adam's step counters a few % of the
state), bfloat16 with and without optimizer state, worlds of 2, 3 and 4. `measure` gets what each rank really holds from the real DDP, ZeRO-1 and FSDP2
code, on a pretend world (sharding.measured_holdings)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from .model import STRATEGIES, Spec
from .sharding import measured_holdings


@dataclass(frozen=True)
class Case:
    name: str
    spec: Spec
    world: int
    optimizer: str


CASES = (
    Case("few rows, 2 ranks, Adam", Spec(width=1001, depth=1, hidden=5, classes=3), 2, "adam"),
    Case(
        "few rows, 4 ranks, momentum",
        Spec(width=1001, depth=1, hidden=5, classes=3, seed=1),
        4,
        "momentum",
    ),
    Case(
        "frozen first half, 2 ranks, Adam",
        Spec(width=48, depth=4, classes=10, frozen=2, seed=2),
        2,
        "adam",
    ),
    Case("one wide head, 2 ranks, Adam", Spec(width=40, depth=2, classes=3001, seed=3), 2, "adam"),
    Case(
        "bfloat16, 3 ranks, plain SGD",
        Spec(width=50, depth=3, classes=7, dtype="bfloat16", seed=4),
        3,
        "sgd",
    ),
    # ZeRO-1's greedy: the head (1,600 elements) to rank 0, then both 1,024-element weights to
    # rank 1: rank 1 holds 16,392 B of Adam state, rank 0 12,804 B
    Case(
        "a head and weights of similar size, 4 ranks, Adam",
        Spec(width=16, depth=2, classes=100, seed=5),
        4,
        "adam",
    ),
    # 34 tensors of at most 64 elements: the step counters are 2.8% of DDP's Adam state
    Case(
        "many small tensors, bfloat16, 2 ranks, Adam",
        Spec(width=4, depth=8, classes=2, dtype="bfloat16", seed=6),
        2,
        "adam",
    ),
)
KINDS = ("parameters", "gradients", "optimizer")

# What the judge may vary per run (probes.specimen_rng: the first of each, the specimen above,
# in a notebook): sizes whose parity over the world, and so every mistake's miss, stays. The
# columns of the few-rows models (their rows, 5 and 3, are what uneven sharding shows on) and
# the wide head's rows, odd over 2 ranks
WIDTHS = {0: (1001, 999, 1003), 1: (1001, 1003, 997)}
CLASSES = {3: (3001, 2999, 3003)}


def drawn(rng) -> tuple[Case, ...]:
    """CASES with the sizes above drawn from `rng` (a notebook's: CASES themselves)."""
    cases = list(CASES)
    for i, widths in WIDTHS.items():
        cases[i] = replace(cases[i], spec=replace(cases[i].spec, width=rng.choice(widths)))
    for i, classes in CLASSES.items():
        cases[i] = replace(cases[i], spec=replace(cases[i].spec, classes=rng.choice(classes)))
    return tuple(cases)


def measure(cases=CASES) -> dict[tuple[str, str], dict]:
    """(case name, strategy) -> bytes of each kind on the rank that holds the most of it."""
    out = {}
    for case in cases:
        for strategy in STRATEGIES:
            ranks = measured_holdings(case.spec, strategy, case.optimizer, case.world)
            out[case.name, strategy] = {k: max(getattr(r, k) for r in ranks) for k in KINDS}
    return out
