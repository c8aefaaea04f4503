"""What `course selftest` runs for notebook 08: each check with its reference answer. The
notebook records no headline effect (clipping buys stability, not speed)."""

from __future__ import annotations

from . import reference as ref


def answers() -> dict:
    """check id -> the arguments its locked cell passes, as the reference answers."""
    return {
        "08-total-norm": lambda: (ref.reference_total_norm,),
        "08-clipped-step": lambda: (ref.reference_clipped_step,),
        "08-max-norm": lambda: (ref.reference_choose_max_norm,),
        "08-accum-clip": lambda: (ref.reference_accumulated_clipped_step,),
    }


def effects() -> dict:
    return {}
