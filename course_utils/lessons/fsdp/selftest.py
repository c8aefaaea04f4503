"""What `course selftest` runs for notebook 13: each check with its reference answer, and the
headline effect (what one rank holds under FSDP2 against DDP) from the notebook's launch."""

from __future__ import annotations

from ...effects import effect
from . import reference as ref
from .demo import run_demo, workdir
from .probes import LearnerFile
from .reference_scripts import SHARD


def shard_file():
    path = workdir() / "shard.py"
    path.write_text(SHARD, encoding="utf-8")
    return path


def answers() -> dict:
    """check id -> the arguments its locked cell passes, as the reference answers."""
    return {
        "13-predict-bytes": lambda: (ref.reference_predict_bytes,),
        "13-choose-plan": lambda: (ref.reference_choose_plan,),
        "13-fully-shard": lambda: (LearnerFile(shard_file()),),  # as check_shard hands it on
    }


def memory_effect():
    demo = run_demo()
    return effect(
        "FSDP2 sharding (vs DDP)",
        metric="bytes held per rank (parameters, gradients, Adam state)",
        baseline=max(demo.held("ddp", r) for r in range(2)),
        improved=max(demo.held("fsdp", r) for r in range(2)),
        ratios=[demo.held("ddp", r) / demo.held("fsdp", r) for r in range(2)],
        unit="bytes",
        show=False,
    )


def effects() -> dict:
    return {"FSDP2 memory": memory_effect}
