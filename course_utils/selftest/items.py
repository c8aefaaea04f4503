"""What `course selftest` runs: one item per registered check and per headline effect.

Each lesson package has a `selftest` module that says how its notebook would call each check
with the lesson's reference answer (`answers()`: check id -> a function returning the check's
arguments) and how it measures its headline effect (`effects()`: name -> a function returning
a `cu.effect` Effect). Items are named by strings so that a child process can rebuild them.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

# notebook prefix -> (notebook stem, lesson package): the order the course is taught in. A
# prefix is the notebook's name up to its first "_" ("02b" for 02b_large_batch), and the start
# of its check ids ("02b-lr-scaling"): judge.py imports a check's lesson by it.
LESSONS = {
    "00": ("00_measuring", "measuring"),
    "01": ("01_one_cycle", "one_cycle"),
    "02": ("02_batch_size", "batch_size"),
    "02b": ("02b_large_batch", "large_batch"),
    "03": ("03_data_loading", "data_loading"),
    "04": ("04_mixed_precision", "mixed_precision"),
    "05": ("05_fast_kernels", "fast_kernels"),
    "06": ("06_ddp", "distributed"),
    "07": ("07_accumulation_checkpointing", "accumulation"),
    "08": ("08_gradient_clipping", "clipping"),
    "09": ("09_no_bias_before_bn", "bn_bias"),
    "10": ("10_habits", "habits"),
    "11": ("11_capstone", "capstone"),
    "12": ("12_transformers", "transformers"),
    "13": ("13_fsdp", "fsdp"),
    "14": ("14_timeline_compile", "timeline"),
    "15": ("15_memory_precision", "memory"),
    "16": ("16_tensor_pipeline", "parallel"),
    "17": ("17_triton_kernels", "kernels"),
    "18": ("18_speedrun", "speedrun"),
}
CHECK, EFFECT = "check", "effect"


@dataclass(frozen=True)
class Item:
    """One part of the self-test, run in its own process."""

    lesson: str  # notebook prefix, "04"
    kind: str  # CHECK or EFFECT
    name: str  # the check id, or the effect's name in its lesson's `effects()`
    target: str = ""  # "module:function" to run instead (tests use it for fake items)

    @property
    def key(self) -> str:
        return f"{self.lesson}/{self.kind}/{self.name}"

    @property
    def notebook(self) -> str:
        return LESSONS[self.lesson][0] if self.lesson in LESSONS else self.lesson


def lesson_selftest(prefix: str):
    """The `selftest` module of lesson `prefix`."""
    return importlib.import_module(f"course_utils.lessons.{LESSONS[prefix][1]}.selftest")


def lesson_checks(prefix: str) -> list[str]:
    """Ids of the checks lesson `prefix` registers (`course_utils.checks.REGISTRY`)."""
    from ..checks import REGISTRY

    importlib.import_module(f"course_utils.lessons.{LESSONS[prefix][1]}")
    return [c for c in REGISTRY if c.split("-", 1)[0] == prefix]


def _selects(only: str, prefix: str) -> bool:
    """Whether `--only` names lesson `prefix`: "02" selects 02 and 02b, the lessons numbered 02;
    "02b", or a notebook's name ("02_batch_size"), selects that lesson alone."""
    named = only.split("_")[0]
    family = named.isdigit() and "_" not in only
    return prefix == named or (family and prefix[:2] == named)


def discover(only: list[str] | None = None) -> list[Item]:
    """Every registered check and every headline effect of the lessons named in `only`
    (notebook prefixes; all when None), in teaching order."""
    prefixes = [p for p in LESSONS if not only or any(_selects(o, p) for o in only)]
    items = []
    for prefix in prefixes:
        items += [Item(prefix, CHECK, c) for c in lesson_checks(prefix)]
        items += [Item(prefix, EFFECT, e) for e in lesson_selftest(prefix).effects()]
    return items
