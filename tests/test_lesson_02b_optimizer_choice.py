"""Lesson 02b, check 02b-optimizer-choice: a rule that weighs steps to the target against the
runs' spread passes, written either way; each shortcut fails on the race that exposes it; a
Race returned for its name is told a name is expected; the reference is refused."""

from __future__ import annotations

import importlib
import math
import os
import re
from pathlib import Path

import pytest
from check_helpers import failure, status_of
from judge_helpers import remote_verdict

from course_utils.lessons import large_batch as lesson
from course_utils.lessons.large_batch import selftest

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


def margin_rule(noise, beats):
    """The notebook's rule with its two judgement calls swapped out: which spread is noise, and
    how the gap is compared with it."""

    def choose(races):
        reached = {k: r for k, r in races.items() if r.steps < math.inf}
        if not reached:
            return None
        best = min(reached, key=lambda k: reached[k].steps)
        if best == ADAMW or ADAMW not in reached:
            return best
        return best if beats(races[ADAMW], races[best], noise(races[ADAMW], races[best])) else ADAMW

    return choose


ten_percent_strict = margin_rule(lambda a, b: 0.1 * a.steps, lambda a, b, n: b.steps < a.steps - n)
ten_percent = margin_rule(lambda a, b: 0.1 * a.steps, lambda a, b, n: b.steps <= a.steps - n)
fastest_spread_only = margin_rule(lambda a, b: b.spread, lambda a, b, n: a.steps - b.steps > n)
gap_at_least_spread = margin_rule(
    lambda a, b: max(a.spread, b.spread), lambda a, b, n: a.steps - b.steps >= n
)


@pytest.mark.parametrize(
    "wrong, race",
    [
        (ten_percent_strict, "a win inside the noise"),
        (ten_percent, "a win inside the noise"),
        (fastest_spread_only, "a win inside AdamW's spread only"),
        (gap_at_least_spread, "a gap equal to the spread"),
    ],
)
def test_optimizer_choice_fails_rules_that_misjudge_the_spread_on_the_race_between(wrong, race):
    exc = failure(lesson.check_optimizer_choice, wrong)
    failed = [p.split(": ")[0] for p in exc.summary.split("; ") if "the race says" in p]
    assert race in failed, exc.summary


def test_optimizer_choice_says_a_name_is_expected_when_given_a_race():
    def returns_race(races):
        return races[by_margin(races)] if by_margin(races) else None

    exc = failure(lesson.check_optimizer_choice, returns_race)
    assert "the Race object of 'LARS" in exc.summary and "str key of `results`" in exc.summary
    assert "the race says" not in exc.summary


def test_optimizer_choice_refuses_the_reference_given_or_called():
    for given in (
        lesson.reference_choose_optimizer,
        lambda r: lesson.reference_choose_optimizer(r),
    ):
        exc = failure(lesson.check_optimizer_choice, given)
        assert exc.status == "failed" and "reference answer" in exc.summary
    (selftest_answer,) = selftest.answers()["02b-optimizer-choice"]()
    assert status_of(lesson.check_optimizer_choice, selftest_answer) == "passed"


# --- judged as `course grade` judges: the learner's side in another process --------------------

RED_TEAM = Path(__file__).resolve().parent / "redteam"


def test_judged_remotely_the_reference_passes():
    """The rule decides each race in a probe; the judge knows the decisions: the reference's
    bare code passes with its side in another process."""
    verdict = remote_verdict(
        "02b-optimizer-choice",
        "course_utils.lessons.large_batch.lars_choice:reference_choose_optimizer.__wrapped__",
    )
    assert verdict["status"] == "passed", verdict["message"]


def test_judged_remotely_a_wrong_answer_fails_as_in_a_notebook(monkeypatch):
    """A red-team rule that takes the fewest steps fails in the judge as in a notebook, with
    the same message but for the step counts, which the judge draws at another scale (a Race
    returned is told apart from a name there too)."""
    monkeypatch.syspath_prepend(str(RED_TEAM))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(RED_TEAM), str(RED_TEAM.parent)]))
    wrong = importlib.import_module("test_02_lars").choose_fewest_steps
    here = failure(lesson.check_optimizer_choice, wrong)
    there = remote_verdict("02b-optimizer-choice", "test_02_lars:choose_fewest_steps")
    assert here.status == there["status"] == "failed", there["message"]
    numbers = re.compile(r"\d+")  # the races' steps and spreads: scaled by the judge's draw
    assert numbers.sub("N", there["message"]) == numbers.sub("N", here.summary)


# --- the judge's draws ---------------------------------------------------------------------------


def test_every_drawn_race_keeps_its_decision_and_exposes_its_shortcut():
    """200 draws of each race, as the judge draws them: the margin rule (both ways) decides
    each as lars_races says, and each shortcut still misses the race that exposes it."""
    import random

    from course_utils.lessons.large_batch.lars_probes import races_of
    from course_utils.lessons.large_batch.lars_races import RACE_NAMES, draw_race

    exposes = {
        "a win inside the noise": (fewest_steps, ten_percent_strict, ten_percent),
        "the fastest is not the most accurate": (most_accurate,),
        "AdamW never reached the target": (always_adamw,),
        "nobody reached the target": (no_none,),
        "a win inside AdamW's spread only": (fastest_spread_only,),
        "a gap equal to the spread": (gap_at_least_spread,),
    }
    for seed in range(200):
        rng = random.Random(seed)
        for name in RACE_NAMES:
            table, want, _ = draw_race(name, rng)
            races = races_of(table)
            assert by_margin(races) == by_keys_and_intervals(races) == want, (seed, name, table)
            for wrong in exposes.get(name, ()):
                assert wrong(races) != want, (seed, name, wrong.__name__, table)


def test_the_notebooks_races_are_the_first_draws():
    """In a notebook every draw is the first option: the races this file's messages and the
    red team's cases were measured on."""
    from course_utils.lessons.large_batch.lars_races import draw_race
    from course_utils.probes import specimen_rng

    table, want, why = draw_race("a win inside the noise", specimen_rng())
    assert table[ADAMW] == (40, 6, 0.61) and want == ADAMW
    assert why.startswith("LAMB's 5 fewer steps are less than its spread of 7 steps")
    table, _, _ = draw_race("the fastest is not the most accurate", specimen_rng())
    assert sorted(table.values()) == [(50, 4, 0.61), (80, 5, 0.66), (120, 10, 0.70)]
