"""Lesson 18, the transformer speed-run: the check passes the reference recipe and fails, naming
the cause, a run that reads the validation text, one that never reaches the target, one that
trains fewer tokens than its recipe declares, one that learned from other text than it was
given, a model kept from an earlier call; the ablation check passes a lever tied for first and
fails a wrong ranking. Default tests shrink the baseline (and, where only the rules are tested,
make it 'slow'); the timed comparisons at full size run with COURSE_TESTS=all."""

from __future__ import annotations

import dataclasses
import os

import pytest
import torch
from check_helpers import failure, not_attempted

from course_utils import checks as harness
from course_utils.errors import HeldOutUsed
from course_utils.lessons import speedrun as lesson
from course_utils.lessons.speedrun import ablation_check, checks, text
from course_utils.lessons.speedrun.recipe import fit

pytestmark = pytest.mark.timeout(900)
ALL = os.environ.get("COURSE_TESTS") == "all"
TINY = lesson.Recipe(steps=60, rows=16, lr=4e-3, schedule=True, attention="sdpa", packing=True)


def biggest():
    """The reference's answer to 18-ablation, importable as test_lesson_18:biggest."""
    return "packing"


@pytest.fixture
def small(monkeypatch):
    """A check that trains little: a 'baseline' of 1000 s (the time part passes at once), one
    pair, and a target 60 steps of TINY reach (3.0-3.2 nats/byte from 5.55)."""
    monkeypatch.setattr(checks, "_baseline_seconds", lambda key, seed: (1e3, 1e3, 1_000_000))
    monkeypatch.setattr(checks, "_warm_up", lambda: None)
    monkeypatch.setattr(checks, "PAIRS", 1)
    monkeypatch.setattr(checks, "target", lambda: 3.4)


def runs(recipe, *, steps=None, data=None):
    """A learner's speedrun that trains `recipe` (or its first `steps`) on `data` (default: the
    text it is given) through the lesson's loop, and the my_recipe that declares `recipe`."""

    def speedrun(given):
        plan = recipe if steps is None else dataclasses.replace(recipe, steps=steps)
        return fit.__wrapped__(plan, given if data is None else data()).model

    return speedrun, lambda device: recipe


def test_validation_text_is_apart_from_training_text_and_ciphered_per_key():
    train = {bytes(d.to(torch.uint8).tolist()) for d in text.TrainText(0)}
    val = [bytes(d.to(torch.uint8).tolist()) for d in text.validation_docs.__wrapped__()]
    assert len(val) == text.n_validation() and not train & set(val)
    plain, ciphered = text.TrainText(0), text.TrainText(1234)
    table = text.cipher(1234)
    assert torch.equal(table[plain[0]], ciphered[0]) and not torch.equal(plain[0], ciphered[0])
    assert sorted(table.tolist()) == list(range(256))


def test_every_recipe_trains_its_declared_slots():
    for recipe in (lesson.BASELINE, TINY):
        data = lesson.batches(recipe, text.TrainText(0), torch.Generator().manual_seed(0))
        tokens, targets = next(data)
        assert tokens.shape == targets.shape == (recipe.rows, lesson.row_len())


def test_the_reference_recipe_passes_the_rules_and_the_target(small):
    speedrun, my_recipe = runs(TINY)
    result = lesson.check_speedrun(speedrun, my_recipe)
    assert result.status == "passed", result.message


def test_the_stub_says_not_attempted():
    assert failure(lesson.check_speedrun, not_attempted, not_attempted).status == "not-attempted"


def test_reading_the_validation_text_fails_naming_it(small):
    def peeking(given):
        model = fit.__wrapped__(dataclasses.replace(TINY, steps=3), given).model
        lesson.validation_loss(model)  # stop early on the validation text: refused
        return model

    error = failure(lesson.check_speedrun, peeking, lambda d: dataclasses.replace(TINY, steps=3))
    assert "validation_loss" in error.summary


def test_reading_the_validation_text_fails_even_when_the_error_is_caught(small):
    def quietly(given):
        try:
            text.validation_docs()
        except HeldOutUsed:
            pass
        return fit.__wrapped__(dataclasses.replace(TINY, steps=3), given).model

    error = failure(lesson.check_speedrun, quietly, lambda d: dataclasses.replace(TINY, steps=3))
    assert "validation_docs" in error.summary
    harness.held_out_reads.clear()


def test_a_run_that_stops_short_of_the_target_fails_the_loss_part(small):
    short = dataclasses.replace(TINY, steps=8)
    error = failure(lesson.check_speedrun, *runs(short))
    assert "validation loss" in error.summary and "the target is 3.40" in error.summary


def test_a_run_that_trains_fewer_tokens_than_its_recipe_declares_fails_naming_it(small):
    speedrun, my_recipe = runs(dataclasses.replace(TINY, steps=600), steps=60)
    error = failure(lesson.check_speedrun, speedrun, my_recipe)
    assert "trains its recipe's tokens" in error.summary and "declares" in error.summary


def test_a_run_that_learns_the_plain_text_instead_of_its_argument_fails_naming_it(small):
    speedrun, my_recipe = runs(TINY, data=lesson.training_text)
    error = failure(lesson.check_speedrun, speedrun, my_recipe)
    assert "learned from the text it was given" in error.summary
    assert "as the plain text" in error.summary


def test_a_model_kept_from_an_earlier_call_fails_naming_it(small):
    kept = fit.__wrapped__(dataclasses.replace(TINY, steps=2), text.TrainText(0)).model

    def warm_start(given):
        return kept

    error = failure(lesson.check_speedrun, warm_start, lambda d: TINY)
    assert "trained from scratch" in error.summary and "built before this call" in error.summary


def test_something_other_than_a_model_fails_naming_it(small):
    error = failure(lesson.check_speedrun, lambda given: "done", lambda d: TINY)
    assert "returns a model" in error.summary


def test_the_unchanged_baseline_fails_as_not_faster(monkeypatch):
    """The learner's recipe is the baseline itself (60 steps on both sides, to keep it short):
    the time part fails, and says which measured part."""
    short = dataclasses.replace(lesson.BASELINE, steps=60)
    monkeypatch.setattr(checks, "baseline", lambda: short)
    monkeypatch.setattr(checks, "target", lambda: 6.0)
    error = failure(lesson.check_speedrun, *runs(short))
    assert "time to target" in error.summary and "below" in error.summary
    assert "slots/s" in error.summary and "no cheaper" in error.summary


# --- the ablation ------------------------------------------------------------------------------

REFERENCE_LIKE = dataclasses.replace(lesson.reference_recipe.__wrapped__(), steps=900)


@pytest.fixture
def fast_ablation(monkeypatch):
    from course_utils.lessons.speedrun import ablate

    monkeypatch.setattr(ablate, "steps_timed", lambda: 24)


@pytest.mark.parametrize("lever", ["packing", "attention"])
def test_the_ablation_passes_either_lever_of_the_measured_tie(lever, fast_ablation):
    """On this CPU packing and SDPA each buy ~1.35x (docs in ablation_check.THRESHOLDS)."""
    result = lesson.check_ablation(lambda d: REFERENCE_LIKE, lambda: lever)
    assert result.status == "passed", result.message


def test_the_ablation_fails_a_lever_that_buys_least(fast_ablation):
    recipe = dataclasses.replace(REFERENCE_LIKE, fused_optimizer=True)
    error = failure(lesson.check_ablation, lambda d: recipe, lambda: "fused_optimizer")
    assert "the lever that buys the most" in error.summary and "you predicted" in error.summary


def test_the_ablation_names_a_lever_the_recipe_does_not_use():
    error = failure(lesson.check_ablation, lambda d: REFERENCE_LIKE, lambda: "checkpointing")
    assert "keeps the baseline's checkpointing" in error.summary


def test_the_ablation_names_what_is_not_a_lever():
    error = failure(lesson.check_ablation, lambda d: REFERENCE_LIKE, lambda: "schedule")
    assert "not a lever the ablation undoes" in error.summary


def test_the_ablation_needs_two_levers_to_rank():
    packed_only = dataclasses.replace(lesson.BASELINE, packing=True)
    error = failure(lesson.check_ablation, lambda d: packed_only, lambda: "packing")
    assert "nothing to rank" in error.summary


def test_the_ablation_thresholds_carry_evidence():
    for threshold in (*lesson.THRESHOLDS.values(), *ablation_check.THRESHOLDS.values()):
        assert threshold.evidence


# --- full size: the reference and valid alternatives against the real baseline ------------------


def own_packing(recipe):
    """A valid alternative: the learner packs the documents with their own code."""

    def speedrun(given):
        device = torch.device("cpu")
        torch.manual_seed(1)
        model = lesson.make_model(recipe, device)
        opt = lesson.make_optimizer(recipe, model.parameters(), device)
        stream = torch.cat([torch.cat([d, torch.tensor([10])]) for d in given])
        T, g = lesson.row_len(), torch.Generator().manual_seed(1)
        for step in range(recipe.steps):
            for group in opt.param_groups:
                group["lr"] = lesson.rate(recipe, step)
            start = torch.randint(0, len(stream) - T - 1, (recipe.rows, 1), generator=g)
            chunk = stream[start + torch.arange(T + 1)]
            loss = lesson.lm_loss(model(chunk[:, :-1]), chunk[:, 1:])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        return model

    return speedrun, lambda device: recipe


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(lambda: own_packing(TINY), id="own-packing-loop"),
        pytest.param(lambda: runs(dataclasses.replace(TINY, fused_optimizer=True)), id="foreach"),
    ],
)
def test_valid_alternatives_pass_the_rules_and_the_target(answer, small):
    result = lesson.check_speedrun(*answer())
    assert result.status == "passed", result.message


@pytest.mark.skipif(not ALL, reason="COURSE_TESTS=all: 3 timed pairs at full size (~5 min)")
@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(lambda: runs(lesson.reference_recipe.__wrapped__()), id="reference"),
        pytest.param(lambda: own_packing(lesson.reference_recipe.__wrapped__()), id="own-packing"),
        pytest.param(
            lambda: runs(
                dataclasses.replace(lesson.reference_recipe.__wrapped__(), fused_optimizer=True)
            ),
            id="foreach-adamw",
        ),
    ],
)
def test_the_reference_and_valid_alternatives_pass_at_full_size(answer):
    result = lesson.check_speedrun(*answer())
    assert result.status == "passed", result.message


@pytest.mark.skipif(not ALL, reason="COURSE_TESTS=all: the baseline's whole run 3 times (~8 min)")
def test_the_baseline_at_full_size_fails_as_not_faster():
    error = failure(lesson.check_speedrun, *runs(lesson.BASELINE))
    assert "time to target" in error.summary and "below" in error.summary


# --- judged as `course grade` judges: the check body here, the learner's side in a child ------

reference_recipe = lesson.reference_recipe


def test_the_ablation_verdict_judged_outside_the_learners_process(fast_ablation):
    from pathlib import Path

    from judge_helpers import remote_verdict

    verdict = remote_verdict(
        "18-ablation",
        "test_lesson_18:reference_recipe",
        "test_lesson_18:biggest",
        paths=(Path(__file__).parent,),
    )
    assert verdict["status"] in ("passed", "failed"), verdict["message"]


@pytest.mark.timeout(1800)
@pytest.mark.skipif(not ALL, reason="COURSE_TESTS=all: the whole check in a judged child (~5 min)")
def test_the_speedrun_verdict_judged_outside_the_learners_process():
    from pathlib import Path

    from judge_helpers import remote_verdict

    verdict = remote_verdict(
        "18-speedrun",
        "course_utils.lessons.speedrun.reference:reference_speedrun",
        "course_utils.lessons.speedrun.reference:reference_recipe",
        paths=(Path(__file__).parent,),
        timeout=1500,  # 3 pairs of ~1 + ~0.2 min CPU; 10 min passed under load 5 (2026-12-07)
    )
    assert verdict["status"] == "passed", verdict["message"]
