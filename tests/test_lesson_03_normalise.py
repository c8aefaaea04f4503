"""Check 03-normalise (exercise 4) passes valid normalisers and fails the plausible mistakes,
naming the cause only where the answer's values match what that mistake gives; and the tip 17
grid's bookkeeping. Every test runs in well under a second."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
import torch
from check_helpers import failure, not_attempted, status_of
from judge_helpers import remote_verdict
from torch import nn

from course_utils.lessons import data_loading as lesson
from course_utils.lessons.data_loading import normalise, normalise_check


def _cat(loader) -> torch.Tensor:
    return torch.cat([x for x, _ in loader])


def _fixed(mean: torch.Tensor, std: torch.Tensor, scale: float = 255.0):
    """normalise(x) = (x / scale - mean) / std, with mean and std moved to x's device."""
    return lambda x: (x.float() / scale - mean.to(x.device)) / std.to(x.device)


# --- valid answers ------------------------------------------------------------------------


def test_passes_the_reference():
    assert status_of(lesson.check_normalise, lesson.reference_make_normaliser) == "passed"


def test_passes_statistics_taken_and_applied_in_the_0_255_scale():
    def in_255(train, test):
        x = _cat(train).float()
        return _fixed(x.mean((0, 2, 3), keepdim=True), x.std((0, 2, 3), keepdim=True), 1.0)

    assert status_of(lesson.check_normalise, in_255) == "passed"


def test_passes_a_module_with_buffers_from_std_mean_over_the_whole_split():
    class Normalise(nn.Module):
        def __init__(self, mean, std):
            super().__init__()
            self.register_buffer("mean", mean.view(1, -1, 1, 1))
            self.register_buffer("std", std.view(1, -1, 1, 1))

        def forward(self, x):
            return (x.float() / 255 - self.mean.to(x.device)) / self.std.to(x.device)

    def as_module(train, test):
        std, mean = torch.std_mean(_cat(train).float() / 255, dim=(0, 2, 3))
        return Normalise(mean, std)

    assert status_of(lesson.check_normalise, as_module) == "passed"


# --- wrong answers: each fails, and the message names what the values match -------------


def _global(train, test):
    x = _cat(train).float() / 255
    return _fixed(x.mean(), x.std())


def _test_split(train, test):
    x = _cat(test).float() / 255
    return _fixed(x.mean((0, 2, 3), keepdim=True), x.std((0, 2, 3), keepdim=True))


def _both_splits(train, test):
    x = torch.cat([_cat(train), _cat(test)]).float() / 255
    return _fixed(x.mean((0, 2, 3), keepdim=True), x.std((0, 2, 3), keepdim=True))


def _batch_means(train, test):
    per = [((x.float() / 255).mean((0, 2, 3)), (x.float() / 255).std((0, 2, 3))) for x, _ in train]
    mean = torch.stack([m for m, _ in per]).mean(0).view(1, 3, 1, 1)
    return _fixed(mean, torch.stack([s for _, s in per]).mean(0).view(1, 3, 1, 1))


def _batch_stds(train, test):
    x = _cat(train).float() / 255
    stds = torch.stack([(b.float() / 255).std((0, 2, 3)) for b, _ in train]).mean(0)
    return _fixed(x.mean((0, 2, 3), keepdim=True), stds.view(1, 3, 1, 1))


def _as_if_full(train, test):
    s = q = 0.0
    for b, _ in train:
        x = b.double() / 255
        s, q = s + x.sum((0, 2, 3)), q + (x * x).sum((0, 2, 3))
    n = len(train) * train.batch_size * b.shape[2] * b.shape[3]
    mean = s / n
    return _fixed(mean.float().view(1, 3, 1, 1), (q / n - mean**2).sqrt().float().view(1, 3, 1, 1))


def _first_batch(train, test):
    x = next(iter(train))[0].float() / 255
    return _fixed(x.mean((0, 2, 3), keepdim=True), x.std((0, 2, 3), keepdim=True))


def _own_batch(train, test):
    def normalise(b):
        x = b.float() / 255
        return (x - x.mean((0, 2, 3), keepdim=True)) / x.std((0, 2, 3), keepdim=True)

    return normalise


def _stats_255_on_0_1(train, test):
    x = _cat(train).float()
    return _fixed(x.mean((0, 2, 3), keepdim=True), x.std((0, 2, 3), keepdim=True))


def _stats_0_1_on_0_255(train, test):
    x = _cat(train).float() / 255
    return _fixed(x.mean((0, 2, 3), keepdim=True), x.std((0, 2, 3), keepdim=True), 1.0)


def _batch_means_pooled_std(train, test):
    xs = [b.float() / 255 for b, _ in train]
    mean = torch.stack([x.mean((0, 2, 3)) for x in xs]).mean(0).view(1, 3, 1, 1)
    std = (torch.cat(xs) - mean).pow(2).mean((0, 2, 3), keepdim=True).sqrt()
    return _fixed(mean, std)


def _within_batch_variance(train, test):
    x = _cat(train).float() / 255
    var = sum(b.float().div(255).var((0, 2, 3), correction=0) * len(b) for b, _ in train)
    return _fixed(x.mean((0, 2, 3), keepdim=True), (var / len(x)).sqrt().view(1, 3, 1, 1))


def _drops_last_batch(train, test):
    x = torch.cat([b for b, _ in train if len(b) == train.batch_size]).float() / 255
    return _fixed(x.mean((0, 2, 3), keepdim=True), x.std((0, 2, 3), keepdim=True))


def _std_in_0_255(train, test):
    x = _cat(train).float()
    return _fixed(x.mean((0, 2, 3), keepdim=True) / 255, x.std((0, 2, 3), keepdim=True))


WRONG = {
    "global": (_global, "one mean and std for all channels"),
    "test-split": (_test_split, "statistics of the test split"),
    "both-splits": (_both_splits, "training and test splits together"),
    "batch-means": (_batch_means, "mean of the batch means and of the batch stds"),
    "batch-means-pooled-std": (_batch_means_pooled_std, "the std pooled around it"),
    "within-batch-variance": (_within_batch_variance, "variance about its own mean"),
    "drops-last-batch": (_drops_last_batch, "without the smaller last batch"),
    "std-in-0-255": (_std_in_0_255, "the std left in the 0-255 scale"),
    "batch-stds": (_batch_stds, "std averaged over batches"),
    "as-if-full": (_as_if_full, "number of batches times the batch size"),
    "first-batch": (_first_batch, "first batch's statistics"),
    "own-batch": (_own_batch, "its own statistics"),
    "255-on-0-1": (_stats_255_on_0_1, "0-255 scale applied to x / 255"),
    "0-1-on-255": (_stats_0_1_on_0_255, "applied to 0-255 pixels"),
}


@pytest.mark.parametrize("name", sorted(WRONG))
def test_fails_a_plausible_mistake_naming_what_its_values_match(name):
    answer, cause = WRONG[name]
    exc = failure(lesson.check_normalise, answer)
    assert exc.status == "failed"
    assert cause in exc.summary
    others = [c for n, (_, c) in WRONG.items() if n != name]
    assert not any(c in exc.summary for c in others), exc.summary


def test_names_no_cause_for_values_that_match_no_known_mistake():
    def noisy(train, test):
        x = _cat(train).float() / 255
        return _fixed(x.mean((0, 2, 3), keepdim=True) + 0.03, x.std((0, 2, 3), keepdim=True))

    exc = failure(lesson.check_normalise, noisy)
    assert "Your values match" not in exc.summary and "Reread 'Exercise 4" in exc.summary


def test_fails_a_normaliser_that_copies_the_batch_to_the_host():
    def via_cpu(train, test):
        x = _cat(train).float() / 255
        mean, std = x.mean((0, 2, 3), keepdim=True), x.std((0, 2, 3), keepdim=True)
        return lambda b: ((b.cpu().float() / 255 - mean) / std).to(b.device)

    exc = failure(lesson.check_normalise, via_cpu)
    assert "copied to the host" in exc.summary


def _right(train):
    x = _cat(train).float() / 255
    return x.mean((0, 2, 3), keepdim=True), x.std((0, 2, 3), keepdim=True)


def test_fails_statistics_left_on_the_cpu_saying_where_they_stay():
    def on_cpu(train, test):
        mean, std = _right(train)
        return lambda b: (b.float() / 255 - mean) / std

    exc = failure(lesson.check_normalise, on_cpu)
    assert "tensors on two devices" in exc.summary and "stay on the CPU" in exc.summary


def test_fails_statistics_moved_once_to_the_first_device_seen():
    def first_device(train, test):
        mean, std = _right(train)
        kept = {}

        def normalise(b):
            kept.setdefault("m", (mean.to(b.device), std.to(b.device)))
            return (b.float() / 255 - kept["m"][0]) / kept["m"][1]

        return normalise

    exc = failure(lesson.check_normalise, first_device)
    assert "first device it sees" in exc.summary and "stay on the CPU" not in exc.summary


def test_fails_numpy_per_batch_as_a_host_only_call():
    def via_numpy(train, test):
        mean, std = (t.numpy() for t in _right(train))
        return lambda b: torch.from_numpy((b.numpy() / 255 - mean) / std).float()

    exc = failure(lesson.check_normalise, via_numpy)
    assert "called .numpy()" in exc.summary and "numpy works on host memory only" in exc.summary


def test_an_op_the_meta_stand_in_lacks_is_its_limit_not_the_learners():
    def clips_outliers(train, test):  # boolean-mask reads need nonzero(), which meta lacks
        mean, std = _right(train)

        def normalise(b):
            y = (b.float() / 255 - mean.to(b.device)) / std.to(b.device)
            hot = y > 6
            y[hot] = y[hot].clamp(max=6)
            return y

        return normalise

    result = lesson.check_normalise(clips_outliers)
    device = next(p for p in result.parts if p.name == "on the batch's device, float32")
    assert result.status == "passed" and device.status == "not-applicable"
    assert "does not implement" in device.message and "not your code's fault" in device.message


def test_fails_a_normaliser_that_returns_float64():
    def doubles(train, test):
        x = _cat(train).double() / 255
        mean, std = x.mean((0, 2, 3), keepdim=True), x.std((0, 2, 3), keepdim=True)
        return lambda b: (b.double() / 255 - mean.to(b.device)) / std.to(b.device)

    assert "float32" in failure(lesson.check_normalise, doubles).summary


def test_reports_an_unattempted_exercise():
    assert failure(lesson.check_normalise, not_attempted).status == "not-attempted"


def test_says_when_the_test_split_was_read():
    exc = failure(lesson.check_normalise, _test_split)
    assert "read the test split 1x" in exc.summary


# --- the specimen keeps the mistakes apart, at every seed the judge may draw ---------------


@pytest.mark.parametrize("seed", normalise_check.SEEDS)
def test_every_named_mistake_misses_the_right_values_by_far_more_than_the_tolerance(seed):
    train, test = normalise_check.specimen(seed)
    right = normalise_check._affine(*normalise_check._stats(train))(test)
    tol = normalise_check.THRESHOLDS["norm_value_tol"].value
    for cause, f in normalise_check.mistakes(train, test).items():
        got = torch.cat([f(b) for b in test.split(normalise_check.SPEC_BATCH)])
        assert (got - right).abs().max() > 60 * tol, cause


@pytest.mark.parametrize("seed", normalise_check.SEEDS)
def test_every_named_mistake_but_per_batch_statistics_misses_mean_0_std_1_by_far(seed):
    train, test = normalise_check.specimen(seed)
    tol = normalise_check.THRESHOLDS["norm_stat_tol"].value
    for cause, f in normalise_check.mistakes(train, test).items():
        out = torch.cat([f(b) for b in train.split(normalise_check.SPEC_BATCH)])
        mean, std = out.mean((0, 2, 3)), out.std((0, 2, 3), unbiased=False)
        off = max(mean.abs().max().item(), (std - 1).abs().max().item())
        assert (off < tol) if "its own statistics" in cause else (off > 10 * tol), cause


@pytest.mark.parametrize("seed", normalise_check.SEEDS)
def test_named_mistakes_differ_from_each_other_by_more_than_the_match_tolerance(seed):
    """Each pair by >= 1.5 norm_match on both splits: a sample std (values within 0.02 of a
    mistake's) still matches one mistake only."""
    train, test = normalise_check.specimen(seed)
    tol = normalise_check.THRESHOLDS["norm_match"].value
    outs = {
        cause: [
            torch.cat([f(b) for b in x.split(normalise_check.SPEC_BATCH)]) for x in (train, test)
        ]
        for cause, f in normalise_check.mistakes(train, test).items()
    }
    for (a, xs), (b, ys) in itertools.combinations(outs.items(), 2):
        gap = max(
            ((x - y).abs() / y.abs().clamp_min(1)).max().item() for x, y in zip(xs, ys, strict=True)
        )
        assert gap > 1.5 * tol, (a, b)


@pytest.mark.parametrize("seed", normalise_check.SEEDS)
def test_the_specimens_channels_and_splits_differ(seed):
    train, test = normalise_check.specimen(seed)
    mean, std = normalise_check._stats(train)
    test_mean, _ = normalise_check._stats(test)
    assert mean.flatten().max() - mean.flatten().min() > 0.3
    assert std.flatten().max() / std.flatten().min() > 2.5
    assert (mean - test_mean).abs().max() > 0.1
    assert len(train) % normalise_check.SPEC_BATCH != 0


# --- the tip 17 grid ------------------------------------------------------------------------


def test_steps_to_target_and_the_target_come_from_the_smoothed_losses():
    runs = [
        normalise.Run(True, True, 0, [2.0, 1.3, 1.0]),
        normalise.Run(True, False, 0, [2.0, 1.8, 1.4]),
    ]
    assert normalise.target_loss(runs) == 1.4
    assert normalise.median_steps(runs, 1.4) == {
        "BatchNorm, normalised input": 2,
        "BatchNorm, x/255 input": 3,
    }
    assert "0.67x the steps of x/255 (2 vs 3)" in normalise.describe(runs, 1.4)


def test_a_run_that_never_reaches_the_target_has_no_step_count():
    assert normalise.Run(False, False, 0, [2.0, 1.9]).steps_to(1.0) is None


# --- judged outside the learner's kernel, as `course grade` does -----------------------------


def test_judged_remotely_the_reference_passes_and_a_mistake_fails_as_in_a_notebook(monkeypatch):
    """The check body in this process (the judge, which draws a specimen seed), every call to
    the answer in a child (the kernel) through the probe: the reference passes, fitting on the
    test split fails, as in a notebook."""
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parent))
    reference = "course_utils.lessons.data_loading.reference:reference_make_normaliser"
    assert remote_verdict("03-normalise", reference)["status"] == "passed"
    judged = remote_verdict("03-normalise", "test_lesson_03_normalise:_test_split")
    assert judged["status"] == status_of(lesson.check_normalise, _test_split) == "failed"
