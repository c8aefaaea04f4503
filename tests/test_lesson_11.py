"""Lesson 11, the capstone: the speed-run check passes the reference and fails the unchanged
baseline on time (both timed for real, interleaved), and fails fast, naming the cause, a run
that reads the test split, autocasts to fp16 without a GradScaler, misses the target, or does
not return a model. Everything else is tested without training to the end."""

from __future__ import annotations

import dataclasses
import inspect
import multiprocessing
import time

import pytest
import torch
from check_helpers import fails, failure, not_attempted

from course_utils import checks as harness
from course_utils import device as device_mod
from course_utils.device import DEVICE_CLASSES
from course_utils.lessons import capstone as lesson
from course_utils.lessons.capstone import ablate as ablation_mod
from course_utils.lessons.capstone import checks as capstone_checks
from course_utils.lessons.capstone import recipe as recipe_mod
from course_utils.lessons.capstone import runs as runs_mod
from course_utils.lessons.capstone import splits, watch

pytestmark = pytest.mark.timeout(600)
unguarded_fit = lesson.fit.__wrapped__


@pytest.fixture
def slow_baseline(monkeypatch):
    """A baseline that 'took' 1000 s and one pair: the time part passes at once, so a test
    sees the other parts without timing anything."""
    monkeypatch.setattr(
        capstone_checks, "_baseline_seconds", lambda dataset, seed: (1000.0, 1000.0)
    )
    monkeypatch.setattr(capstone_checks, "PAIRS", 1)


def own_loop(recipe):
    """A learner's speed-run that trains with `recipe` through its own copy of the loop."""
    return lambda train_set: unguarded_fit(recipe, train_set, leave=False).model


def few_batches(step_hook=None, dtype=None, scaler=False):
    """A learner's loop over 2 batches of the data set (a test of the rules, not of speed;
    fp16 on a CPU is slow)."""

    def speedrun(train_set):
        device = torch.device("cpu")
        model = recipe_mod.make_model(lesson.tuned_recipe())
        opt = torch.optim.AdamW(model.parameters(), 0.01)
        grad_scaler = torch.amp.GradScaler("cpu", enabled=scaler)
        x, y = lesson.decode_all(train_set, device)  # every call decodes what it is given
        for xb, yb in lesson.device_batches(x[:64], y[:64], 32, torch.Generator().manual_seed(0)):
            with torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
                loss = torch.nn.functional.cross_entropy(model(xb), yb)
            opt.zero_grad()
            grad_scaler.scale(loss).backward()
            grad_scaler.step(opt)
            grad_scaler.update()
            if step_hook:
                step_hook(model)
        return model

    return speedrun


def test_the_reference_speedrun_reaches_the_target_faster_than_the_baseline():
    result = lesson.check_speedrun(own_loop(lesson.tuned_recipe()))
    assert result.status == "passed", result.message
    time_part = next(p for p in result.parts if p.name == "time to target")
    assert time_part.value >= lesson.THRESHOLDS[result.device_class].value
    assert f"median of {lesson.pairs()} interleaved pairs" in time_part.message


def test_the_unchanged_baseline_loop_fails_the_time_part(monkeypatch):
    """The learner's loop is the baseline itself: no faster, whatever the machine's load.
    (One epoch on both sides keeps the test short; the ratio is what is graded.)"""
    short = dataclasses.replace(lesson.BASELINE, epochs=1)
    monkeypatch.setattr(capstone_checks, "baseline", lambda: short)
    error = failure(lesson.check_speedrun, own_loop(short))
    assert "time to target" in error.summary and "below" in error.summary


def test_stopping_early_on_the_test_split_fails_naming_it():
    def peek(model):
        if lesson.held_out_accuracy(model) >= lesson.TARGET:
            raise StopIteration  # never reached: the first look fails

    error = failure(lesson.check_speedrun, few_batches(step_hook=peek))
    assert "held-out test split (`held_out_accuracy`)" in error.summary
    assert "tuned itself" in error.summary


def test_peeking_fails_even_when_the_learner_catches_the_error():
    def peek_quietly(model):
        try:
            lesson.held_out_accuracy(model)
        except Exception:
            pass

    error = failure(lesson.check_speedrun, few_batches(step_hook=peek_quietly))
    assert "held-out test split" in error.summary


def test_fp16_without_a_grad_scaler_fails_saying_so():
    error = failure(lesson.check_speedrun, few_batches(dtype=torch.float16))
    assert "fp16 needs a GradScaler" in error.summary and "torch.amp.GradScaler" in error.summary


def test_fp16_through_a_grad_scaler_and_bf16_without_are_not_flagged(slow_baseline):
    for answer in (
        few_batches(dtype=torch.float16, scaler=True),
        few_batches(dtype=torch.bfloat16),
    ):
        error = failure(lesson.check_speedrun, answer)  # 2 batches miss the target, nothing else
        assert "GradScaler" not in error.summary and "held-out accuracy" in error.summary


def test_on_a_t4_class_gpu_the_tuned_recipe_autocasts_fp16_through_a_scaler(monkeypatch):
    """A T4 (compute capability 7.5): amp_dtype picks fp16, the tuned recipe autocasts, and
    its loop (run here on the CPU with fp16 forced) scales every loss."""
    monkeypatch.setattr(device_mod, "cuda_capability", lambda device=None: (7, 5))
    t4 = torch.device("cuda")
    assert device_mod.amp_dtype(t4) == torch.float16 and lesson.tuned_recipe(t4).amp
    monkeypatch.setattr(recipe_mod, "amp_dtype", lambda device=None: torch.float16)
    tuned = dataclasses.replace(lesson.tuned_recipe(t4), channels_last=False)
    part = splits.small_subset(lesson.training_set(), 1, tuned.batch_size)
    with watch.precision_watch() as seen:
        unguarded_fit(tuned, part, epochs=1, leave=False)
    assert seen == {"fp16": 1, "scaled": 1}


def test_a_run_that_leaves_worker_processes_running_is_timed_on_the_wall_clock(slow_baseline):
    """CPU seconds would miss the work of processes still running (persistent DataLoader
    workers), so that run is timed on the wall clock; a plain run on the CPU clock."""
    ctx = multiprocessing.get_context("spawn")
    worker = ctx.Process(target=time.sleep, args=(30,))

    def with_worker(train_set):
        worker.start()
        return few_batches()(train_set)

    try:
        error = failure(lesson.check_speedrun, with_worker)
    finally:
        worker.kill()
        worker.join()
    assert "wall-clock seconds" in error.summary
    assert "CPU seconds" in failure(lesson.check_speedrun, few_batches()).summary


def test_too_few_epochs_fails_on_held_out_accuracy(slow_baseline):
    one_epoch = dataclasses.replace(lesson.tuned_recipe(), epochs=1, batch_size=256)
    error = failure(lesson.check_speedrun, own_loop(one_epoch))
    assert "held-out test split" in error.summary and "below" not in error.summary


def test_returning_something_else_than_the_model_fails_saying_so():
    error = failure(lesson.check_speedrun, lambda train_set: {"accuracy": 0.99})
    assert "expected the trained nn.Module" in error.summary


def test_the_untouched_exercise_is_not_attempted():
    assert fails(lesson.check_speedrun, not_attempted) == "not-attempted"


@pytest.mark.parametrize("delegate", ["reference_speedrun", "fit"])
def test_delegating_to_the_lessons_own_answer_fails(delegate):
    def answer(train_set):
        if delegate == "fit":
            return lesson.fit(lesson.tuned_recipe(), train_set).model
        return lesson.reference_speedrun(train_set)

    error = failure(lesson.check_speedrun, answer)
    assert "reference answer" in error.summary


def test_the_check_judges_the_model_after_the_learner_code_has_returned():
    harness.held_out_reads.clear()
    model = recipe_mod.make_model(lesson.tuned_recipe())
    assert 0 <= lesson.held_out_accuracy(model) <= 1  # demos and checks may read it
    assert harness.held_out_reads == []


def test_the_baseline_is_a_newcomers_loop():
    model = recipe_mod.make_model(lesson.BASELINE)
    opt = recipe_mod.make_optimizer(lesson.BASELINE, model.parameters(), torch.device("cpu"))
    assert type(opt) is torch.optim.Adam and opt.defaults["foreach"] is None
    loader = recipe_mod.newcomer_loader(lesson.training_set(), lesson.BASELINE.batch_size)
    assert loader.num_workers == 0 and not lesson.BASELINE.data_on_device


def test_fit_shows_epoch_accuracy_and_time_left(capsys):
    tuned = lesson.tuned_recipe()
    part = splits.small_subset(lesson.training_set(), 2, tuned.batch_size)
    unguarded_fit(tuned, part, epochs=2, label="speed-run")
    bar = capsys.readouterr().err
    assert "speed-run" in bar and "epoch 2/2, train acc" in bar and "<00:00" in bar


def fake_trained(per_step: float, steps: int = 8) -> recipe_mod.Trained:
    segments = [
        recipe_mod.Segment(steps // 4, per_step * f * steps / 4, per_step * f * steps / 4)
        for f in (0.9, 1.0, 1.0, 1.1)
    ]
    return recipe_mod.Trained(None, 1.0, 1.0, segments, steps)


def test_ablation_interleaves_variants_segment_by_segment_and_reuses_known_runs(monkeypatch):
    order = []

    def fake(recipe, dataset, seed, device, label, decoded=None, bar=None):
        for k in range(ablation_mod.SEGMENTS):
            order.append((label, seed, k))
            yield fake_trained(0.5 + seed)

    monkeypatch.setattr(ablation_mod, "_timing", fake)
    baseline = lesson.Run(lesson.BASELINE, 99.0, 0.85, 1, None, (90.0, 110.0))
    rows = lesson.ablation(seeds=2, known={"baseline": baseline})
    names = list(lesson.variants())
    assert [r["variant"] for r in rows] == names + names[::-1]
    timed = [n for n in names if n != "baseline"]
    # round k of seed 0 runs every variant's segment k, the order reversed every other round
    assert [o[0] for o in order[: 2 * len(timed)]] == timed + timed[::-1]
    assert [o[2] for o in order[: 2 * len(timed)]] == [0] * len(timed) + [1] * len(timed)
    assert next(r for r in rows if r["variant"] == "baseline")["run"] is baseline
    assert ("baseline", 1, 0) in order and ("baseline", 0, 0) not in order
    summary = {s["variant"]: s for s in lesson.summarise(rows)}
    assert summary["baseline"]["runs"] == 2 and summary["tuned"]["clock"] == "cpu"


def test_runs_given_a_shared_progress_bar_open_none_of_their_own(monkeypatch):
    """The ablation's variants train interleaved: one bar for all, not one open per variant."""

    class Shared:
        n, postfix = 0, ""

        def update(self, k=1):
            self.n += k

        def set_postfix_str(self, text, refresh=True):
            self.postfix = text

    def no_own_bar(*args, **kwargs):
        raise AssertionError("a run given a shared bar opened its own")

    monkeypatch.setattr(recipe_mod, "tqdm", no_own_bar)
    recipe = dataclasses.replace(lesson.tuned_recipe(), epochs=1)
    part = splits.small_subset(lesson.training_set(), 4, recipe.batch_size)
    shared = Shared()
    for _ in recipe_mod.training.__wrapped__(recipe, part, max_steps=4, bar=shared, label="v"):
        pass
    assert shared.n == 4 and shared.postfix == "v, step 4/4"


def test_a_timing_run_is_projected_from_the_median_step_and_spread_over_its_segments():
    trained = fake_trained(0.5)
    assert trained.projected(100, "cpu") == pytest.approx(1.0 + 100 * 0.5)
    tuned = lesson.tuned_recipe()
    run = runs_mod.as_run(tuned, trained, 10 * tuned.batch_size, "cpu")
    steps = tuned.epochs * 10
    assert run.timed_steps == 8 and run.accuracy is None
    assert run.seconds_range == pytest.approx((1.0 + steps * 0.45, 1.0 + steps * 0.55))
    (s,) = lesson.summarise([{"variant": "tuned", "seed": 0, "seconds": run.seconds, "run": run}])
    assert s["seconds_range"] == run.seconds_range
    assert "projected from 8 steps" in lesson.describe([s])


def test_fit_can_stop_after_some_steps_and_time_them_in_segments():
    tuned = lesson.tuned_recipe()
    part = splits.small_subset(lesson.training_set(), 6, tuned.batch_size)
    run = unguarded_fit(tuned, part, max_steps=5, segment_steps=2, warmup_steps=1, leave=False)
    assert run.steps == 5 and run.warmup.steps == 1
    assert [s.steps for s in run.segments] == [2, 2]


def test_the_tuned_recipe_and_lesson_05_read_one_channels_last_table(monkeypatch):
    from course_utils.lessons.fast_kernels import checks as checks_05

    for cls in DEVICE_CLASSES:
        monkeypatch.setattr(recipe_mod, "device_class", lambda device=None, c=cls: c)
        tuned = lesson.tuned_recipe()
        assert tuned.channels_last == device_mod.channels_last_pays(cls, autocast=tuned.amp)
    assert device_mod.channels_last_pays("cpu-bf16") and not device_mod.channels_last_pays("cpu")
    assert "channels_last_pays(cls)" in inspect.getsource(checks_05._cl_speed)


def test_full_mode_times_one_pair_and_quick_mode_three():
    from course_utils import mode

    try:
        mode.set_quick(False)
        assert lesson.pairs() == 1
        mode.set_quick(True)
        assert lesson.pairs() == lesson.PAIRS == 3
    finally:
        mode.set_quick(None)


def test_ablation_labels_say_what_was_put_back():
    names = list(lesson.variants())
    assert names[0] == "tuned" and names[-1] == "baseline"
    assert "tuned, but loss.item() every step (10)" in names
    assert not any("sync_every_step" in n for n in names)


def test_every_device_class_has_a_threshold_with_its_evidence():
    assert set(lesson.THRESHOLDS) == set(DEVICE_CLASSES)
    everything = [*lesson.THRESHOLDS.values(), *capstone_checks.FULL_GPU.values()]
    assert all(t.value > 1 and t.evidence for t in everything)


@pytest.mark.parametrize(
    "capability, quick, expected",
    [
        ((7, 5), False, 1.15),  # T4: fp16 tensor cores, full mode
        ((7, 0), False, 1.15),  # V100
        ((8, 0), False, 2.0),  # A100: bf16
        ((9, 0), False, 2.0),  # H100
        ((6, 0), False, None),  # P100: no tensor cores, the time part cannot show
        ((7, 5), True, 2.0),  # quick mode: the baseline reaches the target, data-bound
        ((6, 0), True, 2.0),
    ],
)
def test_full_mode_on_a_gpu_asks_less_where_16_bit_math_buys_less(
    monkeypatch, capability, quick, expected
):
    from course_utils import mode

    monkeypatch.setattr(device_mod, "cuda_capability", lambda device=None: capability)
    try:
        mode.set_quick(quick)
        threshold = lesson.time_threshold(torch.device("cuda"))
    finally:
        mode.set_quick(None)
    assert (threshold and threshold.value) == expected
    assert (
        lesson.time_threshold(torch.device("cpu")) is lesson.THRESHOLDS[device_mod.device_class()]
    )


def test_by_estimate_the_reference_clears_each_gpus_bar_and_the_notebook_its_budget():
    """Issue 15's budget (a T4 15 minutes, an A100/H100 3) and the full-mode thresholds,
    against the run-time estimator's figures (scripts/capstone_estimates.py prints them)."""
    from course_utils.lessons.capstone.selftest import full_mode_estimates

    rows = {r["gpu"]: r for r in full_mode_estimates()}
    assert rows["T4"]["budget_s"] == 900 and rows["A100"]["budget_s"] == 180
    assert all(r["notebook_s"] <= r["budget_s"] for r in rows.values())
    bars = capstone_checks.FULL_GPU
    assert rows["T4"]["bar"] is rows["V100"]["bar"] is bars["fp16"]
    assert rows["A100"]["bar"] is rows["H100"]["bar"] is bars["bf16"]
    assert all(r["ratio"] >= r["bar"].value for r in rows.values())
    assert rows["T4"]["ratio"] < bars["bf16"].value  # why a T4 gets a bar of its own


def test_device_batches_augment_on_the_device_and_keep_every_label():
    x = torch.randint(0, 256, (10, 3, 32, 32), dtype=torch.uint8)
    y = torch.arange(10)
    batches = list(lesson.device_batches(x, y, 5, torch.Generator().manual_seed(0)))
    assert [b[0].shape for b in batches] == [(5, 3, 32, 32)] * 2
    assert sorted(torch.cat([b[1] for b in batches]).tolist()) == list(range(10))
    assert all(b[0].dtype == torch.float32 for b in batches)


def test_target_and_baseline_follow_a_mode_decided_after_import():
    """The notebook imports the lesson before `cu.setup` decides the mode (auto mode too)."""
    from course_utils import mode

    try:
        mode.set_quick(False)
        full = (lesson.TARGET, lesson.BASELINE.epochs)
        mode.set_quick(True)
        assert (lesson.TARGET, lesson.BASELINE.epochs) != full
        assert lesson.TARGET == lesson.target() and lesson.BASELINE == lesson.baseline()
    finally:
        mode.set_quick(None)


def test_a_timing_run_yields_its_segments_after_a_warm_up_and_times_only_its_own_steps(
    monkeypatch,
):
    monkeypatch.setattr(ablation_mod, "epochs_timed", lambda: 1.0)
    tuned = lesson.tuned_recipe()
    part = splits.small_subset(lesson.training_set(), 9, tuned.batch_size)
    runs = []
    for run in ablation_mod._timing(tuned, part, 0, None, "t"):
        runs.append(run)
        time.sleep(1.0)  # another variant's segment: not this run's time
    assert len(runs) == ablation_mod.SEGMENTS  # 4 segments of 2 steps, none cut at an epoch end
    assert runs[-1].warmup.steps == ablation_mod.WARMUP_STEPS
    assert [s.steps for s in runs[-1].segments] == [2] * ablation_mod.SEGMENTS
    assert all(s.wall_s < 1.0 for s in runs[-1].segments)


# --- judged as `course grade` judges: the check body here, the learner's side in a child ------


@pytest.fixture
def one_judged_pair(monkeypatch):
    """One interleaved pair (the check's body runs in this process, so this reaches it): the
    baseline and the learner's run timed for real once each."""
    monkeypatch.setattr(capstone_checks, "PAIRS", 1)


@pytest.fixture
def redteam_importable(monkeypatch):
    """The red team's module, importable here and in the judged child (tests/ and
    tests/redteam/ on its path)."""
    import os
    from pathlib import Path

    here = Path(__file__).parent
    paths = [str(here), str(here / "redteam")]
    for path in paths:
        monkeypatch.syspath_prepend(path)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([*paths, os.environ.get("PYTHONPATH", "")]))
    import test_11_capstone

    return test_11_capstone


def test_the_reference_passes_when_judged_outside_the_learners_process(one_judged_pair):
    from judge_helpers import remote_verdict

    verdict = remote_verdict(
        "11-speedrun", "course_utils.lessons.capstone.reference:reference_speedrun"
    )
    assert verdict["status"] == "passed", verdict["message"]
    assert "median of 1 interleaved pair on" in verdict["message"]


def test_a_caught_test_split_read_fails_judged_as_in_a_notebook(
    one_judged_pair, redteam_importable
):
    """The guard's record of the read is the kernel's: the probe returns it, the judge fails
    the check on it, as a notebook's check does."""
    from judge_helpers import remote_verdict

    answer = redteam_importable.wrong_swallows_held_out_guard
    here = failure(lesson.check_speedrun, answer)
    verdict = remote_verdict("11-speedrun", "test_11_capstone:wrong_swallows_held_out_guard")
    assert here.status == verdict["status"] == "failed", verdict["message"]
    assert "held-out test split (`held_out_accuracy`)" in verdict["message"]
