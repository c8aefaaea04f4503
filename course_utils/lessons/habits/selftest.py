"""What `course selftest` runs for notebook 10: each check with its reference answer, and
the headline effect (fixing slow_train's habits, time per step) as the baseline cells do."""

from __future__ import annotations

from ...effects import effect
from ...mode import pick
from . import reference as ref
from .demo import time_runs
from .loop import slow_train


def answers() -> dict:
    """check id -> the arguments its locked cell passes, as the reference answers."""
    return {
        "10-fast-train": lambda: (ref.reference_fast_train,),
        "10-to-tensor": lambda: (ref.reference_to_tensor,),
        "10-evaluate": lambda: (ref.reference_evaluate,),
    }


def habits_effect():
    steps = pick(quick=20, full=40)
    runs = time_runs(
        {"slow_train": slow_train, "fixed": ref.reference_fast_train},
        steps,
        rounds=pick(quick=3, full=5),
        eval_every=10,
    )
    per_step = {k: sorted(v)[len(v) // 2] / steps for k, v in runs.items()}
    return effect(
        "fixing the habits of slow_train",
        metric="time per training step",
        baseline=per_step["slow_train"],
        improved=per_step["fixed"],
        show=False,
    )


def effects() -> dict:
    return {"habits fixed": habits_effect}
