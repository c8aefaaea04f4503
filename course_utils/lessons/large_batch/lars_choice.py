"""Check 02b-optimizer-choice: the learner's rule for choosing an optimizer from a large-batch
race (lars_demo.Race results) decides races whose right answer each plausible shortcut misses:
a win smaller than the run's own noise, one smaller than AdamW's noise only, one equal to the
noise, a baseline that never reached the target, a race nobody finished, a winner whose best
accuracy is lower, and a clear win. The answer is a name (a key of the results) or None.

The judge draws each race afresh (lars_races.draw_race) and sends its numbers; the learner's
rule decides it in a probe (lars_probes.choice_in). The decision each race calls for is
lars_races' own, on the judge's side."""

from __future__ import annotations

import math

from ... import wire
from ...checks import check, correct, reference
from ...probes import observe, specimen_rng
from .lars_demo import Race
from .lars_probes import ADAMW, choice_in, races_of
from .lars_races import RACE_NAMES, draw_race


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


@check(
    "02b-optimizer-choice",
    points=2,
    hint="Reread section 2's race: what is raced, which runs have a step count at all, and "
    "how large a gap must be before it is evidence rather than noise.",
)
def check_optimizer_choice(choose_optimizer) -> list:
    rng, parts = specimen_rng(), []
    for name in RACE_NAMES:
        table, want, why = draw_race(name, rng)
        races = races_of(table)
        got = observe(choice_in, choose_optimizer, table)
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
    """Why `got` (as the probe sent it: a Race arrives as a wire.Record) is not an answer (a
    key of `races` or None), or "" when it is one."""
    if got is None or (isinstance(got, str) and got in races):
        return ""
    expected = "return a name, the str key of `results` (such as its .name), or None"
    if isinstance(got, wire.Record) and got.type_name == "Race":
        return (
            f"you returned the Race object of {got.fields.get('name')!r}, not its name: {expected}"
        )
    if isinstance(got, str):
        return f"you returned {got!r}, which is not a key of `results`: {expected}"
    kind = got.type_name if isinstance(got, wire.Record | wire.Opaque) else type(got).__name__
    return f"you returned a {kind}, not a name: {expected}"
