"""Lesson 11, the capstone: the speed-run check passes the reference, fails a run that misses
the target on held-out data, a run no faster than the baseline, and what is not a model."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from check_helpers import fails, failure, not_attempted

from course_utils.device import DEVICE_CLASSES
from course_utils.lessons import capstone as lesson
from course_utils.lessons.capstone import checks as capstone_checks

pytestmark = pytest.mark.timeout(600)


@pytest.fixture
def fast_baseline(monkeypatch):
    """A baseline that 'took' 1000 s: the time part passes, so a test sees the other parts."""
    real = capstone_checks.train_recipe

    def fake(recipe, dataset, seed=0, device=None):
        if recipe == lesson.BASELINE:
            return lesson.demo.Run(recipe, 1000.0, 0.0, 0)
        return real(recipe, dataset, seed, device)

    monkeypatch.setattr(capstone_checks, "train_recipe", fake)


def own_loop(recipe):
    """A learner's speed-run that trains with `recipe` through its own copy of the loop."""
    unguarded = lesson.train_recipe.__wrapped__
    return lambda train_set: unguarded(recipe, train_set).model


def test_the_reference_speedrun_reaches_the_target_faster_than_the_baseline():
    result = lesson.check_speedrun(own_loop(lesson.tuned_recipe()))
    assert result.status == "passed", result.message
    time_part = next(p for p in result.parts if p.name == "time to target")
    assert time_part.value >= lesson.THRESHOLDS[result.device_class].value


def test_the_unchanged_baseline_loop_fails_the_time_part(monkeypatch):
    """The learner's loop is the baseline itself: no faster, whatever the machine's load.
    (One epoch on both sides keeps the test short; the ratio is what is graded.)"""
    short = dataclasses.replace(lesson.BASELINE, epochs=1)
    monkeypatch.setattr(capstone_checks, "BASELINE", short)
    error = failure(lesson.check_speedrun, own_loop(short))
    assert "time to target" in error.summary and "below" in error.summary


def test_too_few_epochs_fails_on_held_out_accuracy(fast_baseline):
    one_epoch = dataclasses.replace(lesson.tuned_recipe(), epochs=1, batch_size=256)
    error = failure(lesson.check_speedrun, own_loop(one_epoch))
    assert "held-out test split" in error.summary


def test_returning_something_else_than_the_model_fails_saying_so(fast_baseline):
    error = failure(lesson.check_speedrun, lambda train_set: {"accuracy": 0.99})
    assert "expected the trained nn.Module" in error.summary


def test_the_untouched_exercise_is_not_attempted():
    assert fails(lesson.check_speedrun, not_attempted) == "not-attempted"


def test_delegating_to_the_lessons_own_answer_fails():
    error = failure(lesson.check_speedrun, lambda train_set: lesson.reference_speedrun(train_set))
    assert "reference answer" in error.summary


def test_every_device_class_has_a_threshold_with_its_evidence():
    assert set(lesson.THRESHOLDS) == set(DEVICE_CLASSES)
    assert all(t.value > 1 and t.evidence for t in lesson.THRESHOLDS.values())


def test_device_batches_augment_on_the_device_and_keep_every_label():
    x = torch.randint(0, 256, (10, 3, 32, 32), dtype=torch.uint8)
    y = torch.arange(10)
    batches = list(lesson.device_batches(x, y, 5, torch.Generator().manual_seed(0)))
    assert [b[0].shape for b in batches] == [(5, 3, 32, 32)] * 2
    assert sorted(torch.cat([b[1] for b in batches]).tolist()) == list(range(10))
    assert all(b[0].dtype == torch.float32 for b in batches)
