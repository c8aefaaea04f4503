"""Quick mode: one switch that shrinks every workload so a notebook runs in about a minute.

Who decides, first match wins: the papermill parameter `quick` (set_quick), then
$COURSE_QUICK (1/true/yes/on: quick; any other non-empty value: full), then the auto mode:
full where this device's estimated full-mode run time fits the notebook's budget, quick
otherwise (session.setup decides it once per kernel; see course_utils/selftest/estimate.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")
_forced: bool | None = None
_auto: Decision | None = None  # the auto mode's decision, once session.setup has made it
TRUE = {"1", "true", "yes", "on"}


@dataclass(frozen=True)
class Decision:
    """Which mode runs and why, in words a learner can act on."""

    quick: bool
    source: str  # "parameter", "COURSE_QUICK", "auto" or "default"
    reason: str


def set_quick(value: bool | None) -> None:
    """Force quick mode on or off (the papermill parameter `quick`); None: $COURSE_QUICK, then
    the auto mode decide."""
    global _forced
    _forced = None if value is None else bool(value)


def set_auto(decision: Decision | None) -> None:
    """Record the auto mode's decision (None forgets it)."""
    global _auto
    _auto = decision


def auto_decision() -> Decision | None:
    return _auto


def env_quick() -> bool | None:
    """What $COURSE_QUICK says: True, False, or None when it is unset or empty."""
    text = os.environ.get("COURSE_QUICK", "").strip().lower()
    return None if not text else text in TRUE


def decided() -> bool:
    """Whether the parameter, $COURSE_QUICK or the auto mode has chosen yet."""
    return _forced is not None or env_quick() is not None or _auto is not None


def is_quick() -> bool:
    if _forced is not None:
        return _forced
    from_env = env_quick()
    if from_env is not None:
        return from_env
    return _auto.quick if _auto is not None else False


def pick(*, quick: T, full: T) -> T:
    """`quick` in quick mode, else `full`: keeps the two sizes side by side where they are used."""
    return quick if is_quick() else full


# Where speed cannot be judged, timed parts are reported, not graded: $COURSE_PLATFORM names
# the place, and this says why. Gradescope's autograder gives each run half a shared vCPU
# and no GPU by default (gradescope/autograder_samples, docs/troubleshooting.md).
UNTIMED_PLATFORMS = {
    "gradescope": "Gradescope grades on half of a shared virtual CPU and no GPU, where a "
    "speed-up cannot be told from the noise; your instructor grades speed with "
    "`course grade` on their own hardware",
}


def untimed_reason() -> str:
    """Why timed parts are not graded here ($COURSE_PLATFORM), or "" where they are."""
    platform = os.environ.get("COURSE_PLATFORM", "").strip().lower()
    return UNTIMED_PLATFORMS.get(platform, "")
