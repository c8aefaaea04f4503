"""Lesson 11: what the speed-run check watches during the learner's call (capstone/watch.py,
splits.Relabelled). A model built before the call, the test split read through the data
module (in DataLoader workers too), decoded images kept from an earlier call or prepared
before the first, a model that learned other labels than its call was given, and a bf16
model each fail naming it; a fresh model, also compiled or in channels_last, passes the
probe. Only the fixture `trained_before` trains to the end (5 epochs, once)."""

from __future__ import annotations

import copy
import io

import pytest
import torch
from check_helpers import failure
from test_lesson_11 import few_batches

import course_utils as cu
from course_utils import checks as harness
from course_utils.lessons import capstone as lesson
from course_utils.lessons.capstone import checks as capstone_checks
from course_utils.lessons.capstone import recipe as recipe_mod
from course_utils.lessons.capstone import rules, splits, watch

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def two_calls(monkeypatch):
    """A baseline that 'took' 1000 s, two pairs: the learner's function is called twice."""
    monkeypatch.setattr(
        capstone_checks, "_baseline_seconds", lambda dataset, seed: (1000.0, 1000.0)
    )
    monkeypatch.setattr(capstone_checks, "PAIRS", 2)


@pytest.fixture
def slow(monkeypatch):
    """A baseline that 'took' 1000 s, one pair: the learner's function is called once."""
    monkeypatch.setattr(
        capstone_checks, "_baseline_seconds", lambda dataset, seed: (1000.0, 1000.0)
    )
    monkeypatch.setattr(capstone_checks, "PAIRS", 1)


def fresh_model() -> torch.nn.Module:
    return recipe_mod.make_model(lesson.tuned_recipe())


def test_a_fresh_model_is_fresh_also_compiled_or_channels_last():
    with watch.module_births() as born:
        plain = fresh_model()
        last = fresh_model().to(memory_format=torch.channels_last)
        compiled = torch.compile(fresh_model(), backend="eager")
    assert watch.stale(plain, born) == watch.stale(last, born) == watch.stale(compiled, born) == []


def test_a_model_kept_or_wrapped_from_before_the_call_is_stale_and_a_copy_is_new():
    old = fresh_model()
    with watch.module_births() as born:
        copied = copy.deepcopy(old)  # a new object: its weights are weight_sources' to judge
        wrapped = torch.nn.Sequential(old)
    assert watch.stale(old, born)[0] == "the model"
    assert watch.stale(copied, born) == []
    assert watch.stale(wrapped, born)[0] == "0"  # the wrapper is new, its content is not


def test_weights_from_before_the_call_are_seen_however_they_were_brought_in(tmp_path):
    old = fresh_model()
    torch.save(old.state_dict(), tmp_path / "earlier.pt")
    kept = copy.deepcopy(old.state_dict())
    earlier_bytes = (tmp_path / "earlier.pt").read_bytes()
    with watch.weight_sources() as sources:
        loaded = fresh_model()
        loaded.load_state_dict(kept)
        deep = copy.deepcopy(old)
        from_file = fresh_model()
        from_file.load_state_dict(torch.load(tmp_path / "earlier.pt"))
        from_bytes = fresh_model()
        from_bytes.load_state_dict(torch.load(io.BytesIO(earlier_bytes)))
        checkpoint = io.BytesIO()  # the best epoch, saved and loaded back within the call
        own_saved = fresh_model()
        torch.save(own_saved.state_dict(), checkpoint)
        checkpoint.seek(0)
        own_saved.load_state_dict(torch.load(checkpoint))
        assigned = fresh_model()
        assigned.load_state_dict(kept, assign=True)
        own = fresh_model()
        best = copy.deepcopy(own)  # keeping the best epoch: copies of this call's weights
        ema = torch.optim.swa_utils.AveragedModel(own)
        ema.update_parameters(own)
        found = {
            name: sources.from_before(m)
            for name, m in [
                ("loaded", loaded),
                ("deep", deep),
                ("from_file", from_file),
                ("from_bytes", from_bytes),
                ("own_saved", own_saved),
                ("assigned", assigned),
                ("own", own),
                ("best", best),
                ("ema", ema.module),
            ]
        }
    first = next(iter(old.state_dict()))  # the first conv's weight
    assert "copied in (load_state_dict" in found["loaded"][first]
    assert "deep copies" in found["deep"][first]
    assert "earlier.pt, not saved during the call" in found["from_file"][first]
    assert "from BytesIO, not saved during the call" in found["from_bytes"][first]
    assert found["assigned"][first] == "the same tensors as before the call"
    assert found["own"] == found["best"] == found["ema"] == found["own_saved"] == {}
    assert "copy_" not in torch.Tensor.__dict__  # torch's own methods are back


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


# --- every call trains on what it is given: the classes are renamed per call ---------------


@pytest.fixture(scope="module")
def trained_before():
    """A model trained (5 epochs, tuned recipe) before the check, as a learner's earlier run
    of the cell would have: it scores well above 50% under the usual class names."""
    return recipe_mod.fit.__wrapped__(lesson.tuned_recipe(), lesson.training_set(), leave=False)


def test_a_relabelled_training_set_renames_items_targets_and_classes_and_counts_raw_reads():
    source = lesson.training_set()
    renamed = splits.Relabelled(source, 3)
    assert len(renamed) == len(source) and renamed[5][1] == (source[5][1] + 3) % 10
    assert renamed.targets[:4] == [(t + 3) % 10 for t in source.targets[:4]]
    assert renamed.classes[(2 + 3) % 10] == source.classes[2]
    assert renamed.raw_reads == 0
    assert renamed.blobs is source.blobs and renamed.raw_reads == 1
    assert capstone_checks.SHIFTS and 0 not in capstone_checks.SHIFTS


def test_training_on_the_notebooks_own_train_set_fails_naming_the_labels_it_learned(slow):
    """The argument ignored: the model learns the usual names, not the ones it was given."""

    def answer(train_set):
        return recipe_mod.fit.__wrapped__(lesson.tuned_recipe(), lesson.training_set()).model

    error = failure(lesson.check_speedrun, answer)
    assert "trained on the train_set given" in error.summary
    assert "under the usual names" in error.summary and "(k + 3) mod 10" in error.summary


def test_images_and_labels_prepared_before_the_check_fail_naming_data_preparation(slow):
    kept = lesson.decode_all(lesson.training_set(), "cpu")

    def answer(train_set):
        model = fresh_model()
        x, y = kept
        for xb, yb in lesson.device_batches(x[:64], y[:64], 32, torch.Generator()):
            torch.nn.functional.cross_entropy(model(xb), yb).backward()
        return model

    error = failure(lesson.check_speedrun, answer)
    assert "run 1 read no training image" in error.summary and "data preparation" in error.summary


def test_decoding_in_forked_dataloader_workers_counts_as_reading_the_images(slow):
    def answer(train_set):
        loader = torch.utils.data.DataLoader(
            train_set, batch_size=500, num_workers=2, collate_fn=list
        )
        for _ in loader:
            pass
        return few_batches()(train_set)

    error = failure(lesson.check_speedrun, answer)  # 2 batches miss the target, nothing else
    assert "held-out accuracy" in error.summary and "data preparation" not in error.summary


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_the_test_split_read_in_a_dataloader_worker_fails_even_when_swallowed(slow, context):
    def answer(train_set):
        test = cu.load_data(n_train=len(train_set), n_test=100, raw=True).test
        loader = torch.utils.data.DataLoader(
            test, batch_size=50, num_workers=1, collate_fn=list, multiprocessing_context=context
        )
        try:
            next(iter(loader))
        except Exception:
            pass  # the learner's code hides the guard's error
        return few_batches()(train_set)

    error = failure(lesson.check_speedrun, answer)
    assert "held-out test split (`cu.load_data().test" in error.summary


def test_a_model_loading_weights_trained_before_the_call_fails_even_when_fine_tuned(
    slow, trained_before
):
    """A new model, earlier weights loaded, a new head trained on the renamed labels: the
    labels probe cannot see it, the weights' source can."""
    kept = copy.deepcopy(trained_before.model.state_dict())

    def answer(train_set):
        model = fresh_model()
        model.load_state_dict(kept)
        few_batches()(train_set)
        return model

    error = failure(lesson.check_speedrun, answer)
    assert "trained from scratch" in error.summary
    assert "hold values from before this call (run 1): copied in" in error.summary


def test_keeping_the_best_epochs_copy_is_not_flagged(slow):
    def answer(train_set):
        return copy.deepcopy(few_batches()(train_set))

    error = failure(lesson.check_speedrun, answer)  # 2 batches miss the target, nothing else
    assert "held-out accuracy" in error.summary and "from scratch" not in error.summary


def test_a_test_split_loader_with_workers_started_before_the_check_fails(slow):
    test = cu.load_data(n_train=10, n_test=100, raw=True).test
    loader = torch.utils.data.DataLoader(
        test, batch_size=50, num_workers=1, collate_fn=list, persistent_workers=True
    )
    next(iter(loader))  # workers up before the check, out of the guard's reach

    def answer(train_set):
        try:
            for _ in loader:
                pass
        except Exception:
            pass
        return few_batches()(train_set)

    try:
        error = failure(lesson.check_speedrun, answer)
    finally:
        cu.data.close_loader(loader)
    assert "held-out test split (`cu.load_data().test, through a DataLoader`)" in error.summary


def test_accuracy_is_the_median_of_every_timed_runs_model(two_calls, monkeypatch):
    """Three calls: a run trained less than the first is counted (two of three below)."""
    monkeypatch.setattr(capstone_checks, "PAIRS", 3)
    scores = iter([0.9, 0.3, 0.2])

    def fake_scores(model):
        score = next(scores)
        return [score] * 10  # the same under every renaming: no labels verdict

    monkeypatch.setattr(rules, "scores", fake_scores)
    error = failure(lesson.check_speedrun, few_batches())
    assert "median of your 3 timed runs' models scores 30.0% (90.0%, 30.0%, 20.0%)" in (
        error.summary
    )
