"""What `course selftest` runs for notebook 00: each check with its reference answer. The
notebook records no headline effect (its comparisons teach timing, not a technique)."""

from __future__ import annotations

from . import reference as ref


def answers() -> dict:
    """check id -> the arguments its locked cell passes, as the reference answers."""
    return {
        "00-step-timer": lambda: (ref.reference_time_step,),
        "00-activation-bytes": lambda: (ref.reference_saved_bytes,),
        "00-train-flops": lambda: (ref.reference_train_flops,),
        "00-slowest-op": lambda: (ref.reference_slowest_op,),
    }


def effects() -> dict:
    return {}
