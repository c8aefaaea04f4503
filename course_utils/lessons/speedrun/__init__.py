"""Lesson 18, a transformer speed-run (the course's finale): lesson 12's byte-level GPT trained
to a target validation loss in the least time. The text and its guarded validation split (text),
the model (model), the recipe and its loop (recipe), the check's probes and rules (probes,
rules, checks), the ablation and its check (ablate, ablation_check), what the notebook shows
(demo); answers in reference."""

from .ablate import describe, interleave_segments, measure, ranking, variants
from .ablation_check import THRESHOLDS as ABLATION_THRESHOLDS
from .ablation_check import check_ablation
from .checks import THRESHOLDS, check_speedrun, pairs
from .demo import RECORDS, quick_or_full, records_table, timing_run, validation_loss
from .model import GPT, lm_loss
from .recipe import (
    FULL_TARGETS,
    Recipe,
    baseline,
    batches,
    bf16_pays,
    lever_names,
    make_model,
    make_optimizer,
    rate,
    target,
)
from .reference import reference_biggest_lever, reference_recipe, reference_speedrun
from .text import IGNORE, TrainText, row_len, training_text

__all__ = [
    "ABLATION_THRESHOLDS",
    "FULL_TARGETS",
    "GPT",
    "IGNORE",
    "RECORDS",
    "THRESHOLDS",
    "Recipe",
    "TrainText",
    "baseline",
    "batches",
    "bf16_pays",
    "check_ablation",
    "check_speedrun",
    "describe",
    "interleave_segments",
    "lever_names",
    "lm_loss",
    "make_model",
    "make_optimizer",
    "measure",
    "quick_or_full",
    "pairs",
    "ranking",
    "rate",
    "records_table",
    "reference_biggest_lever",
    "reference_recipe",
    "reference_speedrun",
    "row_len",
    "target",
    "timing_run",
    "training_text",
    "validation_loss",
    "variants",
]


def __getattr__(name: str):
    """`lesson.TARGET` / `lesson.BASELINE`: read when used, after `cu.setup` chose the mode."""
    if name == "TARGET":
        return target()
    if name == "BASELINE":
        return baseline()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# harness functions that compute an exercise's answer under another name: the grading kernel
# withholds them. `fit` and `training` given lesson.reference_recipe() are the reference
# speed-run; `measure` is the ablation 18-ablation asks the learner to predict. The check's
# baseline and ablation run where the check runs, never in the kernel.
ANSWERS_ELSEWHERE = (
    "course_utils.lessons.speedrun.recipe:fit",
    "course_utils.lessons.speedrun.recipe:training",
    "course_utils.lessons.speedrun.ablate:measure",
)
