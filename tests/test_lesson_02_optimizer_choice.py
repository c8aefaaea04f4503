"""Lesson 02, check 02-optimizer-choice: a rule that weighs steps to the target against the
runs' spread passes, written either way; each shortcut fails on the race that exposes it."""

from __future__ import annotations

import math

import pytest
from check_helpers import failure, status_of

from course_utils.lessons import batch_size as lesson

ADAMW = "AdamW, linear scaling + warm-up"


def by_margin(races):
    adamw = races[ADAMW]
    reached = [r for r in races.values() if r.steps < math.inf]
    if not reached:
        return None
    fastest = min(reached, key=lambda r: r.steps)
    if fastest is adamw or adamw.steps == math.inf:
        return fastest.name
    return (
        fastest.name if adamw.steps - fastest.steps > max(fastest.spread, adamw.spread) else ADAMW
    )


def by_keys_and_intervals(races):
    """Valid: keys instead of .name, and 'the intervals steps +- spread do not overlap'
    read as the gap exceeding the larger spread."""
    finite = {k: r for k, r in races.items() if math.isfinite(r.steps)}
    if not finite:
        return None
    best = sorted(finite, key=lambda k: finite[k].steps)[0]
    if best == ADAMW or ADAMW not in finite:
        return best
    gap = finite[ADAMW].steps - finite[best].steps
    return best if gap > max(finite[best].spread, finite[ADAMW].spread) else ADAMW


def fewest_steps(races):
    return min(races, key=lambda k: races[k].steps)


def most_accurate(races):
    return max(races, key=lambda k: max(a for _, a in races[k].curve))


def always_adamw(races):
    return ADAMW


def no_none(races):
    best = min(races, key=lambda k: races[k].steps)
    if best != ADAMW and races[ADAMW].steps - races[best].steps <= races[best].spread:
        return ADAMW
    return best


@pytest.mark.parametrize("answer", [by_margin, by_keys_and_intervals])
def test_optimizer_choice_passes_the_margin_rule_written_two_ways(answer):
    assert status_of(lesson.check_optimizer_choice, answer) == "passed"


@pytest.mark.parametrize(
    "wrong, race",
    [
        (fewest_steps, "a win inside the noise"),
        (most_accurate, "the fastest is not the most accurate"),
        (always_adamw, "AdamW never reached the target"),
        (no_none, "nobody reached the target"),
    ],
)
def test_optimizer_choice_fails_each_shortcut_on_the_race_that_exposes_it(wrong, race):
    exc = failure(lesson.check_optimizer_choice, wrong)
    failed = [p.split(": ")[0] for p in exc.summary.split("; ") if "the race says" in p]
    assert race in failed, exc.summary


def test_optimizer_choice_refuses_the_reference():
    exc = failure(lesson.check_optimizer_choice, lambda r: lesson.reference_choose_optimizer(r))
    assert exc.status == "failed"
    assert status_of(lesson.check_optimizer_choice, lesson.reference_choose_optimizer) == "passed"
