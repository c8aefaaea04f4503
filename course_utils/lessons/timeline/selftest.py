"""What `course selftest` runs for notebook 14: each check with its reference answer, the
headline effects as the notebook measures them, and the notebook's cost for the run-time
estimator (`COST`, counted from its sizes)."""

from __future__ import annotations

from ...effects import effect
from ...selftest.estimate import Cost, NotebookCost
from . import reference as ref
from .demo import fixed_vs_slow, regional_rounds


def answers() -> dict:
    """check id -> the arguments its locked cell passes, as the reference answers."""
    return {
        "14-find-stall": lambda: (ref.reference_find_stall,),
        "14-compile-plan": lambda: (ref.reference_choose_compile,),
    }


def stall_effect():
    return effect(
        "fixing the stall the timeline shows (vs the slow loop)",
        fixed_vs_slow(repeats=10),
        metric="time per training step",
        show=False,
    )


def regional_effect():
    rounds = regional_rounds(depth=6, rounds=3)
    whole, blocks = rounds["whole"], rounds["blocks"]
    return effect(
        "regional compilation (vs the whole model)",
        metric="compile time (TorchDynamo + AOTAutograd)",
        baseline=sorted(whole)[len(whole) // 2],
        improved=sorted(blocks)[len(blocks) // 2],
        ratios=[a / b for a, b in zip(whole, blocks, strict=True)],
        show=False,
    )


def effects() -> dict:
    return {"stall fixed": stall_effect, "regional compile": regional_effect}


# Counted from the notebook's sizes (almost no FLOPs: small MLP steps, Dynamo tracing); host
# seconds as first estimated. The quick learner copy then took 183 s at load 15-17 (other
# sessions' tests beside it): docs/results/learner-path-cpu.md, which CPU_RATIO reads
COST = NotebookCost(
    Cost(1, 200, 40),
    Cost(2, 400, 80),
    "traces of 5-step loops in one process and one launch of 2 processes (gloo); TorchDynamo "
    "on small models; compile rounds of AOTAutograd (6 blocks quick, 12 full): host-bound",
)
