"""What notebook 18 shows: a recipe timed on its first steps and projected (the baseline, the
reference), a whole run with its validation loss, the speed-run records the lesson cites, and
the targets per device class."""

from __future__ import annotations

from ...checks import held_out
from ...device import get_device
from ...measure import steady_cpu
from ...mode import pick
from .probes import validation_nll
from .recipe import Recipe, fit
from .text import validation_docs

# KellerJordan/modded-nanogpt's README (commit 0006a9c, "World record history"): 8 H100s,
# GPT-2 small (124M) to 3.28 validation loss on FineWeb. What each record bought, in its words.
RECORDS = (
    ("45 min", "llm.c baseline (Karpathy's GPT-2 trainer)", "—"),
    ("31.4 min", "architectural modernizations & tuned learning rate", "01 (rate)"),
    ("24.9 min", "the Muon optimizer", "—"),
    ("15.2 min", "pad embeddings & architectural improvements", "—"),
    ("12.0 min", "PyTorch 2.4.1 -> 2.5.0", "—"),
    ("7.8 min", "bfloat16 activations", "04 (bf16)"),
    ("5.03 min", "FlexAttention", "12, 17 (fused attention)"),
    ("3.4 min", "logit softcap lowered from 30 to 15", "—"),
)


def records_table() -> str:
    rows = [f"| {t} | {what} | {ours} |" for t, what, ours in RECORDS]
    return "\n".join(["| record | what it bought | the course's lesson |", "|---|---|---|", *rows])


def timing_run(recipe: Recipe, share: float = 0.1) -> dict:
    """`recipe` trained on its first `share` of steps (two segments, on one thread on a CPU),
    projected to its whole run: every step is the same work."""
    steps = 2 * max(1, round(share * recipe.steps / 2))
    from .text import training_text

    with steady_cpu(1):
        run = fit(recipe, training_text(), max_steps=steps, segment_steps=steps // 2)
    clock = "cpu" if get_device().type == "cpu" else "wall"
    return {"steps": steps, "seconds": run.projected(recipe.steps, clock), "clock": clock}


@held_out
def validation_loss(model) -> float:
    """The model's mean loss per byte on the validation text (plain): what the check scores."""
    total, n = validation_nll(model, validation_docs.__wrapped__(), 0)
    return total / n


def quick_or_full() -> str:
    return pick(quick="quick", full="full")
