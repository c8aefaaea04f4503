"""What `course selftest` runs for notebook 15: each check with its reference answer, and the
headline effect (bytes held after the forward, selective checkpointing against none)."""

from __future__ import annotations

from ...effects import effect
from . import reference as ref
from .levers import baseline, measure, policy_contexts
from .specimens import SIZES


def answers() -> dict:
    """check id -> the arguments its locked cell passes, as the reference answers."""
    return {
        "15-selective-policy": lambda: (ref.reference_policy,),
        "15-fp8-scale": lambda: (ref.reference_to_float8,),
        "15-memory-plan": lambda: (ref.reference_plan_for,),
    }


def selective_effect():
    size = SIZES[0]
    held = measure(size, "selective", policy_contexts(ref.reference_policy.__wrapped__))["held"]
    return effect(
        "selective activation checkpointing",
        metric="bytes held for backward after the forward",
        baseline=baseline(size)["none"]["held"],
        improved=held,
        unit="bytes",
        workload=f"GPT d_model={size.d_model}, {size.n_layer} blocks, batch {size.rows} x {size.T}",
        show=False,
    )


def effects() -> dict:
    return {"selective checkpointing memory": selective_effect}
