"""What `course selftest` runs for notebook 01: each check with its reference answers. The
notebook records no headline effect (steps-to-target differ by seed more than by device)."""

from __future__ import annotations

from . import reference as ref


def answers() -> dict:
    """check id -> the arguments its locked cell passes, as the reference answers."""
    return {
        "01-lr-range": lambda: (ref.reference_lr_range_test, ref.reference_suggest_lr),
        "01-one-cycle": lambda: (ref.reference_fit_one_cycle,),
        "01-adamw": lambda: (ref.reference_configure_optimizer,),
    }


def effects() -> dict:
    return {}
