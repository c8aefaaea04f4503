"""The models exercise 1's check predicts for, unseen by the learner: shapes whose rows do
not divide by the world size, a frozen half, a head that dwarfs the rest, bfloat16, worlds of
2, 3 and 4. `measure` gets what each rank really holds from the real DDP, ZeRO-1 and FSDP2
code, on a pretend world (sharding.measured_holdings)."""

from __future__ import annotations

from dataclasses import dataclass

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
)
KINDS = ("parameters", "gradients", "optimizer")


def measure(cases=CASES) -> dict[tuple[str, str], dict]:
    """(case name, strategy) -> bytes of each kind on the rank that holds the most of it."""
    out = {}
    for case in cases:
        for strategy in STRATEGIES:
            ranks = measured_holdings(case.spec, strategy, case.optimizer, case.world)
            out[case.name, strategy] = {k: max(getattr(r, k) for r in ranks) for k in KINDS}
    return out
