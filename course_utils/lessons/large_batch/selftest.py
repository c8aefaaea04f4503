"""What `course selftest` runs for notebook 02b: each check with its reference answer, and the
headline effect (a larger batch with linear LR scaling, time to target) as section 1 does."""

from __future__ import annotations

from ...effects import effect
from ...mode import pick
from ...quadratic import steps_to_target
from . import reference as ref
from .demo import seconds_per_step, time_to_target
from .lars import ReferenceLARS, unguarded
from .lars_choice import reference_choose_optimizer


def answers() -> dict:
    """check id -> the arguments its locked cell passes, as the reference answers."""
    return {
        "02b-lr-scaling": lambda: (ref.reference_lr_schedule,),
        # these two checks refuse the reference itself, as a learner's answer: its bare code
        "02b-trust-ratio": lambda: (unguarded(ReferenceLARS),),
        "02b-optimizer-choice": lambda: (reference_choose_optimizer.__wrapped__,),
    }


def linear_scaling_effect():
    sizes = pick(quick=[4, 16, 64, 256], full=[16, 64, 256, 1024])
    seconds = seconds_per_step(sizes)
    base_lr = steps_to_target([sizes[0]])[sizes[0]][1]
    tt = time_to_target(seconds, base_batch=sizes[0], base_lr=base_lr)
    return effect(
        "larger batch with linear LR scaling",
        metric="time to target (regression, this device's step times)",
        baseline=tt["same LR"][sizes[0]][1],
        improved=min(seconds for _, seconds in tt["linear scaling + warm-up"].values()),
        show=False,
    )


def effects() -> dict:
    return {"linear LR scaling": linear_scaling_effect}
