"""What `course selftest` runs for notebook 16: each check with its reference answer, and the
headline effect (the activations 1F1B holds against GPipe's) from the notebook's launch."""

from __future__ import annotations

from ...effects import effect
from . import reference as ref
from .demo import run_demo, workdir
from .probes import LearnerFile
from .reference_scripts import SHARD


def shard_file():
    path = workdir() / "tp_block.py"
    path.write_text(SHARD, encoding="utf-8")
    return path


def answers() -> dict:
    """check id -> the arguments its locked cell passes, as the reference answers."""
    return {
        "16-predict-comms": lambda: (ref.reference_predict_comms,),
        "16-choose-parallel": lambda: (ref.reference_choose_parallel,),
        "16-shard-block": lambda: (LearnerFile(shard_file()),),  # as check_shard hands it on
    }


def schedule_memory(demo) -> tuple[list[int], list[int]]:
    """Each rank's peak saved bytes under GPipe and under 1F1B, at the most micro-batches."""
    m = max(r["micro_batches"] for r in demo.pipeline)
    gpipe, one = (demo.run(s, m)["ranks"] for s in ("GPipe", "1F1B"))
    return [r["peak_saved"] for r in gpipe], [r["peak_saved"] for r in one]


def memory_effect():
    gpipe, one = schedule_memory(run_demo())
    return effect(
        "1F1B schedule (vs GPipe)",
        metric="activation bytes held per pipeline stage",
        baseline=max(gpipe),
        improved=max(one),
        ratios=[a / b for a, b in zip(gpipe, one, strict=True)],
        unit="bytes",
        show=False,
    )


def effects() -> dict:
    return {"1F1B memory": memory_effect}
