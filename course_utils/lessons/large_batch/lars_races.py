"""The seven races 02b-optimizer-choice asks about, drawn afresh each time the judge grades, each
with the decision it calls for.

Each race exposes a shortcut: a win smaller than the winner's own spread (fewest steps, or a
gap over 10% of AdamW's steps), one larger than the winner's spread but not AdamW's, one equal
to the larger spread, a baseline that never reached the target, a race nobody finished, a
winner whose best accuracy is lower, and a clear win. In a notebook every draw is the first
option, the race the tests and the red team measured (specimen_rng); in the judge the step
counts, spreads and accuracies are drawn within the bounds that keep the race's decision and
its shortcut's mistake, so a table of races copied from the edition, at any scale, matches
none of them (tests/test_lesson_02b_optimizer_choice.py draws 200 of each)."""

from __future__ import annotations

import random

from .lars_probes import ADAMW, INF, LAMB, LARS

Table = dict[str, tuple[float, float, float]]  # optimizer: (steps to target, spread, accuracy)
RACE_NAMES = (
    "a clear win for LARS",
    "a win inside the noise",
    "a win inside AdamW's spread only",
    "a gap equal to the spread",
    "AdamW never reached the target",
    "nobody reached the target",
    "the fastest is not the most accurate",
)


def _int(rng: random.Random, first: int, low: int, high: int) -> int:
    """`first` in a notebook; in the judge any of low..high (`first` among them only where it
    is in those bounds, which may depend on earlier draws)."""
    options = range(low, high + 1)
    return rng.choice((first, *options) if first in options else options)


def _acc(rng: random.Random, first: float) -> float:
    """An accuracy near `first` (0.01 steps); orders that matter are set by the caller."""
    return round(first + rng.choice((0, *range(-3, 4))) / 100, 2)


def draw_race(name: str, rng: random.Random) -> tuple[Table, str | None, str]:
    """(the race's table, the optimizer it calls for, why)."""
    k = rng.choice((1, 2, 3))  # every count and spread k times larger: the same decision
    if name == "a clear win for LARS":
        a, sa = _int(rng, 60, 40, 90), _int(rng, 4, 2, 6)
        table = {
            ADAMW: (k * a, k * sa, _acc(rng, 0.62)),
            LARS: (k * (a // 2), k * _int(rng, 3, 2, 5), _acc(rng, 0.61)),
            LAMB: (k * (a - _int(rng, 5, 1, sa)), k * _int(rng, 5, 3, 7), _acc(rng, 0.61)),
        }
        return table, LARS, "LARS took half AdamW's steps, far more than either run's spread"
    if (
        name == "a win inside the noise"
    ):  # the gap is over 10% of AdamW's steps, under LAMB's spread
        a = _int(rng, 40, 30, 60)
        gap = a // 10 + _int(rng, 1, 1, 3)
        sb, sa = gap + _int(rng, 2, 1, 3), gap + _int(rng, 1, 0, 3)
        table = {
            ADAMW: (k * a, k * sa, 0.61),
            LARS: (k * (a + _int(rng, 4, 2, 6)), k * _int(rng, 5, 3, 6), 0.60),
            LAMB: (k * (a - gap), k * sb, 0.62),
        }
        why = f"LAMB's {k * gap} fewer steps are less than its spread of {k * sb} steps: keep AdamW"
        return table, ADAMW, why
    if name == "a win inside AdamW's spread only":
        a, sl = _int(rng, 50, 40, 70), _int(rng, 3, 2, 4)
        gap = sl + _int(rng, 3, 1, 4)
        sa = gap + _int(rng, 2, 1, 4)
        table = {
            ADAMW: (k * a, k * sa, _acc(rng, 0.62)),
            LARS: (k * (a - gap), k * sl, _acc(rng, 0.61)),
            LAMB: (k * (a + _int(rng, 12, 5, 15)), k * _int(rng, 5, 3, 7), _acc(rng, 0.60)),
        }
        why = (
            f"LARS's {k * gap} fewer steps exceed its own spread of {k * sl} but not AdamW's of "
            f"{k * sa}: AdamW's count alone may be off by that much, so keep AdamW"
        )
        return table, ADAMW, why
    if name == "a gap equal to the spread":
        a, sa = _int(rng, 50, 40, 70), _int(rng, 5, 3, 8)
        table = {
            ADAMW: (k * a, k * sa, _acc(rng, 0.61)),
            LARS: (k * (a + _int(rng, 8, 4, 12)), k * _int(rng, 6, 3, 8), _acc(rng, 0.60)),
            LAMB: (k * (a - sa), k * _int(rng, 4, 2, sa - 1), _acc(rng, 0.62)),
        }
        why = (
            f"LAMB's {k * sa} fewer steps equal AdamW's spread of {k * sa}: a gap no larger "
            "than the spread is noise, so keep AdamW"
        )
        return table, ADAMW, why
    if name == "AdamW never reached the target":
        b = _int(rng, 70, 50, 90)
        table = {
            ADAMW: (INF, 0, _acc(rng, 0.41)),
            LARS: (k * (b + _int(rng, 20, 10, 30)), k * _int(rng, 30, 10, 30), _acc(rng, 0.60)),
            LAMB: (k * b, k * _int(rng, 12, 5, 15), _acc(rng, 0.61)),
        }
        return table, LAMB, "only the layer-wise optimizers reached the target, LAMB first"
    if name == "nobody reached the target":
        accs = (_acc(rng, 0.52), _acc(rng, 0.55), _acc(rng, 0.48))
        table = {o: (INF, 0, acc) for o, acc in zip((ADAMW, LARS, LAMB), accs, strict=True)}
        return table, None, "no run reached the target: the race says nothing (return None)"
    if name == "the fastest is not the most accurate":  # LARS most accurate, LAMB least
        a, gap = _int(rng, 80, 60, 100), _int(rng, 30, 20, 40)
        acc = _acc(rng, 0.66)
        table = {
            ADAMW: (k * a, k * _int(rng, 5, 3, 8), acc),
            LARS: (k * (a + _int(rng, 40, 20, 40)), k * _int(rng, 10, 5, 12), round(acc + 0.04, 2)),
            LAMB: (k * (a - gap), k * _int(rng, 4, 3, 8), round(acc - 0.05, 2)),
        }
        why = (
            f"the race is to the target: LAMB got there {k * gap} steps sooner, beyond both spreads"
        )
        return table, LAMB, why
    raise KeyError(name)
