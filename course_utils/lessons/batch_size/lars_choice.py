"""Check 02-optimizer-choice: the learner's rule for choosing an optimizer from a large-batch
race (lars_demo.Race results) decides races whose right answer each plausible shortcut misses:
a win smaller than the run's own noise, one smaller than AdamW's noise only, one equal to the
noise, a baseline that never reached the target, a race nobody finished, a winner whose best
accuracy is lower, and a clear win. The answer is a name (a key of the results) or None."""

from __future__ import annotations

import math
from collections.abc import Callable

from ... import guards
from ...checks import check, correct, reference
from .lars_demo import Race

ADAMW = "AdamW, linear scaling + warm-up"
LARS = "LARS (SGD momentum + trust ratio)"
LAMB = "LAMB (Adam + trust ratio)"


@reference
def reference_choose_optimizer(races: dict[str, Race]) -> str | None:
    """The optimizer to use at this batch: the one that reached the target in the fewest
    steps, but AdamW (no extra hyper-parameter, already tuned) unless the other beat it by
    more than either run's spread (a gap equal to it is noise); None when nobody reached the
    target (no evidence)."""
    reached = [r for r in races.values() if math.isfinite(r.steps)]
    if not reached:
        return None
    fastest = min(reached, key=lambda r: r.steps)
    adamw = races[ADAMW]
    if fastest is adamw or not math.isfinite(adamw.steps):
        return fastest.name
    margin = max(fastest.spread, adamw.spread)
    return fastest.name if adamw.steps - fastest.steps > margin else ADAMW


def _race(steps: dict[str, tuple[float, float, float]]) -> dict[str, Race]:
    """{name: (steps, spread, best accuracy)} as races with a one-point curve."""
    return {
        name: Race(name, 0.01, s, spread, curve=[(1 if math.isinf(s) else int(s), acc)])
        for name, (s, spread, acc) in steps.items()
    }


INF = math.inf
# name: (races, the decision, why). The gaps sit off every round boundary (no gap is exactly
# 10% of AdamW's steps) and one equals the larger spread, which is noise: the rule is `>`.
SCENARIOS = {
    "a clear win for LARS": (
        _race({ADAMW: (60, 4, 0.62), LARS: (30, 3, 0.61), LAMB: (55, 5, 0.61)}),
        LARS,
        "LARS took half AdamW's steps, far more than either run's spread",
    ),
    "a win inside the noise": (
        _race({ADAMW: (40, 6, 0.61), LARS: (44, 5, 0.60), LAMB: (35, 7, 0.62)}),
        ADAMW,
        "LAMB's 5 fewer steps are less than its spread of 7 steps: keep AdamW",
    ),
    "a win inside AdamW's spread only": (
        _race({ADAMW: (50, 8, 0.62), LARS: (44, 3, 0.61), LAMB: (62, 5, 0.60)}),
        ADAMW,
        "LARS's 6 fewer steps exceed its own spread of 3 but not AdamW's of 8: AdamW's count "
        "alone may be off by that much, so keep AdamW",
    ),
    "a gap equal to the spread": (
        _race({ADAMW: (50, 5, 0.61), LARS: (58, 6, 0.60), LAMB: (45, 4, 0.62)}),
        ADAMW,
        "LAMB's 5 fewer steps equal AdamW's spread of 5: a gap no larger than the spread is "
        "noise, so keep AdamW",
    ),
    "AdamW never reached the target": (
        _race({ADAMW: (INF, 0, 0.41), LARS: (90, 30, 0.60), LAMB: (70, 12, 0.61)}),
        LAMB,
        "only the layer-wise optimizers reached the target, LAMB first",
    ),
    "nobody reached the target": (
        _race({ADAMW: (INF, 0, 0.52), LARS: (INF, 0, 0.55), LAMB: (INF, 0, 0.48)}),
        None,
        "no run reached the target: the race says nothing (return None)",
    ),
    "the fastest is not the most accurate": (
        _race({ADAMW: (80, 5, 0.66), LARS: (120, 10, 0.70), LAMB: (50, 4, 0.61)}),
        LAMB,
        "the race is to the target: LAMB got there 30 steps sooner, beyond both spreads",
    ),
}


@check(
    "02-optimizer-choice",
    points=2,
    hint="Reread section 6's race: what is raced, which runs have a step count at all, and "
    "how large a gap must be before it is evidence rather than noise.",
)
def check_optimizer_choice(choose_optimizer: Callable) -> list:
    choose = guards._as_learner(choose_optimizer)  # the reference itself is refused too
    parts = []
    for name, (races, want, why) in SCENARIOS.items():
        got = choose({k: _copy(r) for k, r in races.items()})
        table = ", ".join(
            f"{k.split(' ')[0].rstrip(',')} {r.steps:.0f}+-{r.spread:.0f} steps"
            for k, r in races.items()
        )
        not_a_name = _not_a_name(got, races)
        if not_a_name:
            parts.append(correct(name, False, f"{not_a_name} ({table})"))
            continue
        ok = got == want
        msg = f"you chose {got!r}" + ("" if ok else f", the race says {want!r}: {why}")
        parts.append(correct(name, ok, f"{msg} ({table})"))
    return parts


def _not_a_name(got, races: dict[str, Race]) -> str:
    """Why `got` is not an answer (a key of `races` or None), or "" when it is one."""
    if got is None or (isinstance(got, str) and got in races):
        return ""
    expected = "return a name, the str key of `results` (such as its .name), or None"
    if isinstance(got, Race):
        return f"you returned the Race object of {got.name!r}, not its name: {expected}"
    if isinstance(got, str):
        return f"you returned {got!r}, which is not a key of `results`: {expected}"
    return f"you returned a {type(got).__name__}, not a name: {expected}"


def _copy(r: Race) -> Race:
    return Race(r.name, r.lr, r.steps, r.spread, r.edge, list(r.curve))
