"""What `course selftest` runs for notebook 04: each check with its reference answer, and
the headline effect (autocast, time per training step) as cells 27-28 do."""

from __future__ import annotations

from ...device import amp_dtype, get_device
from ...effects import effect
from . import reference as ref
from .demo import measure_amp


def answers() -> dict:
    """check id -> the arguments its locked cell passes, as the reference answers."""
    return {
        "04-loss-scale": lambda: (ref.reference_rescued_grads,),
        "04-fp32-island": lambda: (ref.reference_stable_scores,),
        "04-amp-step": lambda: (ref.reference_make_amp_step,),
    }


def autocast_effect():
    device = get_device()
    measured = measure_amp(ref.reference_make_amp_step, device)
    return effect(f"autocast ({amp_dtype(device)})", measured.comparison, show=False)


def effects() -> dict:
    return {"autocast": autocast_effect}
