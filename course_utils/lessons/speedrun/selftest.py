"""What `course selftest` runs for notebook 18: each check with its reference answers, and the
headline effect (the reference recipe against the baseline, each timed on its first tenth of
steps and projected to its whole run, as the check's baseline side is)."""

from __future__ import annotations

from ...effects import effect
from . import reference as ref
from .demo import timing_run
from .recipe import baseline


def answers() -> dict:
    """check id -> the arguments its locked cell passes, as the reference answers."""
    return {
        "18-speedrun": lambda: (ref.reference_speedrun, ref.reference_recipe),
        "18-ablation": lambda: (ref.reference_recipe, ref.reference_biggest_lever),
    }


def speedrun_effect():
    base, tuned = timing_run(baseline()), timing_run(ref.reference_recipe())
    return effect(
        "the transformer speed-run (the reference recipe)",
        metric="time to target",
        baseline=base["seconds"],
        improved=tuned["seconds"],
        unit="s",
        workload="each recipe's first tenth of steps, projected to its whole run",
        show=False,
    )


def effects() -> dict:
    return {"speed-run": speedrun_effect}
