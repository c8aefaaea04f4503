"""What `course selftest` runs for notebook 11: the speed-run check with the reference
answer, and the headline effect (the tuned recipe against the baseline, time to target)."""

from __future__ import annotations

from ...effects import effect
from . import reference as ref
from .recipe import baseline, train_recipe, training_set, tuned_recipe


def answers() -> dict:
    """check id -> the arguments its locked cell passes, as the reference answers."""
    return {"11-speedrun": lambda: (ref.reference_speedrun,)}


def speedrun_effect():
    train_set = training_set()
    slow = train_recipe(baseline(), train_set)
    tuned = train_recipe(tuned_recipe(), train_set)
    return effect(
        "the capstone speed-run (all techniques)",
        metric="time to target",
        baseline=slow.seconds,
        improved=tuned.seconds,
        show=False,
    )


def effects() -> dict:
    return {"speed-run": speedrun_effect}
