"""Lesson 02b's checks, gathered: each compares the learner's code with what a quantity the
scenario fixes must be, exactly (up to float rounding), so none has a threshold to evidence.
02b-lr-scaling: every step's LR of every param group against Goyal et al.'s two rules
(lr_check.py); 02b-trust-ratio: every tensor after every step against LARS (lars_check.py);
02b-optimizer-choice: the decision on seven races (lars_choice.py).

Each body runs the learner's code through a probe (probes.py, lars_probes.py) and computes what
the probe's data must be itself, so the same body decides in a notebook and in the judge."""

from __future__ import annotations

from .lars_check import check_trust_ratio
from .lars_choice import check_optimizer_choice
from .lr_check import check_lr_schedule

THRESHOLDS: dict = {}  # no tolerance beyond float rounding (lr_check.REL_TOL, lars_specimen.close)

__all__ = ["THRESHOLDS", "check_lr_schedule", "check_optimizer_choice", "check_trust_ratio"]
