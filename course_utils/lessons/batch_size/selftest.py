"""What `course selftest` runs for notebook 02: each check with its reference answer, and
the headline effect (larger batch with linear LR scaling, time to target) as section 5 does."""

from __future__ import annotations

from ...effects import effect
from ...measure import steady_cpu
from ...mode import pick
from . import reference as ref
from .demo import make_step
from .lars import ReferenceLARS, unguarded
from .lars_choice import reference_choose_optimizer
from .regression import steps_to_target, time_to_target


def answers() -> dict:
    """check id -> the arguments its locked cell passes, as the reference answers."""
    return {
        "02-throughput-sweep": lambda: (ref.reference_sweep,),
        "02-largest-batch": lambda: (ref.reference_largest_batch,),
        "02-lr-scaling": lambda: (ref.reference_lr_schedule,),
        "02-noise-scale": lambda: (ref.reference_noise_scale,),
        # these two checks refuse the reference itself, as a learner's answer: its bare code
        "02-trust-ratio": lambda: (unguarded(ReferenceLARS),),
        "02-optimizer-choice": lambda: (reference_choose_optimizer.__wrapped__,),
    }


def linear_scaling_effect():
    sizes = pick(quick=[4, 16, 64, 256], full=[16, 64, 256, 1024])
    with steady_cpu():
        sweep = ref.reference_sweep(make_step, sizes)
    base_lr = steps_to_target([sizes[0]])[sizes[0]][1]
    tt = time_to_target({b: b / sweep[b] for b in sizes}, base_batch=sizes[0], base_lr=base_lr)
    return effect(
        "larger batch with linear LR scaling",
        metric="time to target (regression, this device's step times)",
        baseline=tt["same LR"][sizes[0]][1],
        improved=min(seconds for _, seconds in tt["linear scaling + warm-up"].values()),
        show=False,
    )


def effects() -> dict:
    return {"linear LR scaling": linear_scaling_effect}
