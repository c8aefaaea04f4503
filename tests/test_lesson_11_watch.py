"""Lesson 11: what the speed-run check watches during the learner's call (capstone/watch.py).
A model built before the call, the test split read through the data module, decoded images
kept from an earlier call and a bf16 model each fail naming it; a fresh model, also compiled
or in channels_last, passes the probe. No test trains more than 2 batches a call."""

from __future__ import annotations

import copy

import pytest
import torch
from check_helpers import failure
from test_lesson_11 import few_batches

import course_utils as cu
from course_utils import checks as harness
from course_utils.lessons import capstone as lesson
from course_utils.lessons.capstone import checks as capstone_checks
from course_utils.lessons.capstone import recipe as recipe_mod
from course_utils.lessons.capstone import watch

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def two_calls(monkeypatch):
    """A baseline that 'took' 1000 s, two pairs: the learner's function is called twice."""
    monkeypatch.setattr(
        capstone_checks, "_baseline_seconds", lambda dataset, seed: (1000.0, 1000.0)
    )
    monkeypatch.setattr(capstone_checks, "PAIRS", 2)


def fresh_model() -> torch.nn.Module:
    return recipe_mod.make_model(lesson.tuned_recipe())


def test_a_fresh_model_is_fresh_also_compiled_or_channels_last():
    with watch.module_births() as born:
        plain = fresh_model()
        last = fresh_model().to(memory_format=torch.channels_last)
        compiled = torch.compile(fresh_model(), backend="eager")
    assert watch.stale(plain, born) == watch.stale(last, born) == watch.stale(compiled, born) == []


def test_a_model_kept_copied_or_wrapped_from_before_the_call_is_stale():
    old = fresh_model()
    with watch.module_births() as born:
        copied = copy.deepcopy(old)  # copying constructs nothing through __init__
        wrapped = torch.nn.Sequential(old)
    assert watch.stale(old, born)[0] == "the model"
    assert watch.stale(copied, born)[0] == "the model"
    assert watch.stale(wrapped, born)[0] == "0"  # the wrapper is new, its content is not


def test_a_model_trained_before_the_call_fails_as_not_from_scratch(two_calls):
    trained_before = fresh_model()

    def answer(train_set):
        few_batches()(train_set)
        return trained_before

    error = failure(lesson.check_speedrun, answer)
    assert "built before this call (run 1)" in error.summary and "fresh model" in error.summary


def test_returning_the_model_of_an_earlier_call_fails_on_the_second_call(two_calls):
    kept = {}

    def answer(train_set):
        if "model" not in kept:
            kept["model"] = few_batches()(train_set)
        return kept["model"]

    error = failure(lesson.check_speedrun, answer)
    assert "built before this call (run 2)" in error.summary


def test_decoded_images_kept_from_an_earlier_call_fail_naming_data_preparation(two_calls):
    kept = {}

    def answer(train_set):
        if "xy" not in kept:
            kept["xy"] = lesson.decode_all(torch.utils.data.Subset(train_set, range(64)), "cpu")
        model = fresh_model()
        x, y = kept["xy"]
        for xb, yb in lesson.device_batches(x, y, 32, torch.Generator().manual_seed(0)):
            torch.nn.functional.cross_entropy(model(xb), yb).backward()
        return model

    error = failure(lesson.check_speedrun, answer)
    assert "read 64 training images" in error.summary and "run 2 read 0" in error.summary
    assert "data preparation" in error.summary


def test_decoding_every_call_is_not_flagged(two_calls):
    error = failure(lesson.check_speedrun, few_batches())  # 2 batches miss the target only
    assert "held-out accuracy" in error.summary and "data preparation" not in error.summary
    assert "saw your code read none of it" in error.summary


@pytest.mark.parametrize("swallow", [False, True])
def test_reading_the_test_split_through_the_data_module_fails_naming_it(swallow):
    def answer(train_set):
        test = cu.load_data(n_train=len(train_set), n_test=100).test
        try:
            test[0]
        except Exception:
            if not swallow:
                raise
        return few_batches()(train_set)

    error = failure(lesson.check_speedrun, answer)
    assert "held-out test split (`cu.load_data().test`)" in error.summary


def test_outside_a_check_the_test_split_reads_as_usual():
    harness.held_out_reads.clear()
    with watch.data_reads() as reads:
        cu.load_data(n_train=10, n_test=10, raw=True).test[0]
    assert harness.held_out_reads == [] and reads.train == set()


def test_a_bf16_model_fails_saying_it_must_take_float32_images():
    def answer(train_set):
        return few_batches()(train_set).to(torch.bfloat16)

    error = failure(lesson.check_speedrun, answer)
    assert "bfloat16 weights" in error.summary and "must take float32 images" in error.summary
    assert "Your code raised" not in error.summary
