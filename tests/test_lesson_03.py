"""Lesson 03's checks pass the reference answers and fail the mistakes learners make.

Sizes are small (256 decode-heavy images) so the file runs in well under a minute, and no
test depends on the machine being idle: where a speed part could only be graded on free
cores, the test fixes what the harness's parallel-capacity probe reports.
"""

from __future__ import annotations

import time

import psutil
import pytest
import torch
from check_helpers import fails, not_attempted
from torch.utils.data import DataLoader, default_collate

from course_utils.data import CIFAR_MEAN, CIFAR_STD
from course_utils.device import get_device
from course_utils.errors import CheckFailed
from course_utils.lessons import data_loading as lesson


@pytest.fixture(autouse=True)
def small_data(monkeypatch):
    """256 images: an epoch takes a fraction of a second even on a loaded 2-core machine."""
    monkeypatch.setattr(lesson, "n_images", lambda: 256)


def part(result_or_parts, name):
    parts = result_or_parts.parts if hasattr(result_or_parts, "parts") else result_or_parts
    return next(p for p in parts if p.name == name)


# --- exercise 1: profile -------------------------------------------------------------------


def test_profile_check_passes_the_reference_profiler():
    assert lesson.check_profile(lesson.reference_profile).status == "passed"


def test_profile_check_fails_a_profiler_that_never_synchronises():
    def no_sync(loader, step, synchronize):
        return lesson.reference_profile(loader, step, lambda: None)

    assert fails(lesson.check_profile, no_sync) == "failed"


def test_profile_check_fails_a_profiler_that_measures_cpu_time():
    def cpu_time(loader, step, synchronize):
        data_s = compute_s = 0.0
        t0 = time.process_time()
        for x, y in loader:
            t1 = time.process_time()
            step(x, y)
            synchronize()
            t2 = time.process_time()
            data_s, compute_s, t0 = data_s + t1 - t0, compute_s + t2 - t1, t2
        return lesson.EpochProfile(data_s, compute_s)

    assert fails(lesson.check_profile, cpu_time) == "failed"


def test_profile_check_fails_swapped_buckets():
    def swapped(loader, step, synchronize):
        p = lesson.reference_profile(loader, step, synchronize)
        return lesson.EpochProfile(p.compute_s, p.data_s)

    assert fails(lesson.check_profile, swapped) == "failed"


def test_profile_check_reports_not_attempted():
    assert fails(lesson.check_profile, not_attempted) == "not-attempted"


def test_epoch_profile_calls_a_step_data_bound_when_it_waits_longer_than_it_computes():
    assert lesson.EpochProfile(0.6, 0.4).data_bound
    assert not lesson.EpochProfile(0.4, 0.6).data_bound
    assert lesson.EpochProfile(0.0, 0.0).data_fraction == 0.0


# --- exercise 2: fast loader -----------------------------------------------------------------


def fast(dataset, batch_size, device, **overrides):
    kwargs = dict(
        batch_size=batch_size,
        shuffle=True,
        num_workers=2,
        persistent_workers=True,
        pin_memory=device.type == "cuda",
    )
    return DataLoader(dataset, **{**kwargs, **overrides})


def test_fast_loader_check_passes_persistent_workers_on_a_busy_or_idle_machine():
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    result = lesson.check_fast_loader(fast)
    assert result.status == "passed"
    assert part(result, "speed").status in {"passed", "not-applicable"}
    left = [
        p
        for p in psutil.Process().children(recursive=True)
        if p.pid not in before and p.is_running()
    ]
    assert not left, "the check leaves no worker processes behind"


def test_fast_loader_check_grades_speed_when_two_cores_are_free(monkeypatch):
    """With the probe reporting two free cores, one worker (no parallelism) is too slow."""
    monkeypatch.setattr(lesson, "parallel_speedup", lambda: 2.0)
    monkeypatch.setattr(lesson, "n_images", lambda: 128)  # three timed attempts: keep them short

    def one_worker(dataset, batch_size, device):
        return fast(dataset, batch_size, device, num_workers=1)

    with pytest.raises(CheckFailed) as info:
        lesson.check_fast_loader(one_worker)
    assert info.value.status == "failed"
    assert "below the 1.5x expected" in info.value.summary  # the speed part, not a setting


def test_fast_loader_speed_is_not_graded_where_nothing_runs_in_parallel(monkeypatch):
    monkeypatch.setattr(lesson, "parallel_speedup", lambda: 1.0)
    result = lesson.check_fast_loader(fast)
    assert result.status == "passed"
    assert part(result, "speed").status == "not-applicable"


def test_fast_loader_check_fails_a_single_process_loader():
    def single(dataset, batch_size, device):
        return DataLoader(dataset, batch_size=batch_size, shuffle=True)

    assert fails(lesson.check_fast_loader, single) == "failed"


def test_fast_loader_check_fails_the_folklore_four_workers_per_gpu_on_a_cpu_machine():
    if torch.cuda.is_available():
        pytest.skip("4 x device_count() is only 0 without a GPU")

    def folklore(dataset, batch_size, device):
        return fast(
            dataset,
            batch_size,
            device,
            num_workers=4 * torch.cuda.device_count(),
            persistent_workers=False,
        )

    assert fails(lesson.check_fast_loader, folklore) == "failed"


def test_fast_loader_check_fails_workers_restarted_every_epoch():
    def restarted(dataset, batch_size, device):
        return fast(dataset, batch_size, device, persistent_workers=False)

    assert fails(lesson.check_fast_loader, restarted) == "failed"


def test_fast_loader_check_fails_pin_memory_on_the_wrong_device():
    if get_device().type not in ("cpu", "cuda"):
        pytest.skip("either setting is accepted on MPS")

    def wrong_pin(dataset, batch_size, device):
        return fast(dataset, batch_size, device, pin_memory=device.type != "cuda")

    assert fails(lesson.check_fast_loader, wrong_pin) == "failed"


def test_fast_loader_check_fails_a_collate_function_defined_in_the_notebook():
    def collate(batch):
        return default_collate(batch)

    collate.__module__ = "__main__"  # as if written in a notebook cell

    def notebook_collate(dataset, batch_size, device):
        return fast(dataset, batch_size, device, collate_fn=collate)

    assert fails(lesson.check_fast_loader, notebook_collate) == "failed"


def test_fast_loader_check_fails_a_loader_that_does_not_shuffle():
    def unshuffled(dataset, batch_size, device):
        return fast(dataset, batch_size, device, shuffle=False)

    assert fails(lesson.check_fast_loader, unshuffled) == "failed"


def test_fast_loader_check_reports_not_attempted():
    assert fails(lesson.check_fast_loader, not_attempted) == "not-attempted"


def test_spawn_problems_name_lambdas_and_accept_importable_parts():
    data = lesson.decode_heavy(8)
    assert lesson.spawn_problems(DataLoader(data, batch_size=4)) == []
    problems = lesson.spawn_problems(DataLoader(data, batch_size=4, collate_fn=lambda b: b))
    assert len(problems) == 1 and problems[0].startswith("collate_fn")


def test_worker_sweep_reports_time_and_the_memory_workers_add():
    rows = lesson.sweep_workers(lesson.decode_heavy(128), [0, 1], epochs=1)
    assert [r["num_workers"] for r in rows] == [0, 1]
    assert rows[0]["workers_uss_mb"] == 0 and rows[1]["workers_uss_mb"] > 0
    assert all(r["epoch_s"] > 0 and r["startup_s"] > 0 for r in rows)
    assert lesson.knee(rows) in (0, 1)


def test_knee_is_the_fewest_workers_within_ten_percent_of_the_fastest():
    rows = [{"num_workers": n, "epoch_s": t} for n, t in [(0, 2.0), (1, 1.2), (2, 1.05), (4, 1.0)]]
    assert lesson.knee(rows) == 2


# --- exercise 3: transfers -------------------------------------------------------------------


def test_transfer_check_passes_non_blocking_copies():
    def to_device(batch, device):
        return tuple(t.to(device, non_blocking=True) for t in batch)

    assert lesson.check_transfer(to_device).status == "passed"


def test_transfer_check_fails_pinning_every_batch_before_copying():
    def pin_then_copy(batch, device):
        return tuple(t.pin_memory().to(device, non_blocking=True) for t in batch)

    assert fails(lesson.check_transfer, pin_then_copy) == "failed"


def test_transfer_check_fails_blocking_copies_from_pinned_memory():
    def blocking(batch, device):
        return tuple(t.to(device) for t in batch)

    assert fails(lesson.check_transfer, blocking) == "failed"


def test_transfer_check_fails_a_copy_that_changes_the_dtype():
    def to_half(batch, device):
        images, labels = batch
        return images.to(device, torch.float16, non_blocking=True), labels.to(
            device, non_blocking=True
        )

    assert fails(lesson.check_transfer, to_half) == "failed"


def test_transfer_check_reports_not_attempted():
    assert fails(lesson.check_transfer, not_attempted) == "not-attempted"


# --- exercise 4: normalisation on the device -----------------------------------------------


def test_normalize_check_passes_the_batched_reference():
    assert lesson.check_device_normalize(lesson.reference_normalize).status == "passed"


def test_normalize_check_fails_forgetting_to_divide_by_255():
    def no_255(images, mean, std):
        mean = torch.tensor(mean, device=images.device).view(1, -1, 1, 1)
        std = torch.tensor(std, device=images.device).view(1, -1, 1, 1)
        return (images.float() - mean) / std

    assert fails(lesson.check_device_normalize, no_255) == "failed"


def test_normalize_check_fails_hard_coded_cifar_constants():
    def hard_coded(images, mean, std):
        return lesson.reference_normalize(images, CIFAR_MEAN, CIFAR_STD)

    assert fails(lesson.check_device_normalize, hard_coded) == "failed"


def test_normalize_check_fails_float64_output():
    def doubles(images, mean, std):
        return lesson.reference_normalize(images, mean, std).double()

    assert fails(lesson.check_device_normalize, doubles) == "failed"


def test_normalize_check_reports_not_attempted():
    assert fails(lesson.check_device_normalize, not_attempted) == "not-attempted"
