"""What `course selftest` runs for notebook 17: each check with its reference answer, and the
headline effect (the peak bytes of fused attention against the hand-written one)."""

from __future__ import annotations

from ...effects import effect
from . import reference as ref
from .demo import memory_table


def answers() -> dict:
    """check id -> the arguments its locked cell passes, as the reference answers."""
    return {
        "17-fused-softmax": lambda: (ref.reference_softmax,),
        "17-flash-forward": lambda: (ref.reference_attention,),
        "17-predict-traffic": lambda: (ref.reference_predict_traffic,),
    }


def memory_effect():
    _, table = memory_table()
    longest = max(table)
    naive, fused, _ = table[longest]
    return effect(
        "fused attention (SDPA vs hand-written)",
        metric="peak bytes of attention's tensors, forward",
        baseline=naive,
        improved=fused,
        unit="bytes",
        workload=f"causal attention, B=1, H=4, T={longest}, D=16, float32",
        show=False,
    )


def effects() -> dict:
    return {"fused attention memory": memory_effect}
