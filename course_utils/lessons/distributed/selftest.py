"""What `course selftest` runs for notebook 06: both checks on the notebook's reference
scripts (written into a fresh folder, as the notebook's `%%writefile` cells do), and the
headline effect (no_sync under accumulation) from the benchmark launch of cell 8."""

from __future__ import annotations

from pathlib import Path

from ...effects import effect
from .demo import measure_scaling, workdir
from .learner_runs import LearnerFile
from .reference_scripts import SCRIPTS


def write_scripts() -> Path:
    """A fresh folder holding the reference scripts."""
    folder = workdir()
    for name, text in SCRIPTS.items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder


def answers() -> dict:
    """check id -> the arguments its locked cell passes, as the reference answers: each file as
    the locked cell's call hands it to the registered check (a LearnerFile)."""
    return {
        "06-ddp-script": lambda: (LearnerFile(write_scripts() / "ddp_train.py"),),
        "06-no-sync": lambda: (LearnerFile(write_scripts() / "accumulate.py"),),
    }


def no_sync_effect():
    scaling = measure_scaling()
    return effect(
        "no_sync under accumulation (2 processes)",
        metric="time per accumulated step",
        baseline=scaling.median("accumulate x4"),
        improved=scaling.median("accumulate x4 + no_sync"),
        show=False,
    )


def effects() -> dict:
    return {"no_sync": no_sync_effect}
