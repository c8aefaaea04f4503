"""Lesson 03's checks pass the reference answers and valid alternatives, and fail the mistakes
learners make with a message naming the cause.

Sizes are small (128-256 decode-heavy images) so the file runs in about a minute, and no test
depends on the machine being idle: where a speed part could only be graded on free cores,
the test fixes what the harness's parallel-capacity probe reports.
"""

from __future__ import annotations

import functools
import os
import time
from pathlib import Path

import psutil
import pytest
import torch
from check_helpers import fails, failure, not_attempted, status_of
from judge_helpers import remote_verdict
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, default_collate

from course_utils.data import CIFAR_MEAN, CIFAR_STD
from course_utils.lessons import data_loading as lesson
from course_utils.lessons.data_loading import checks


@pytest.fixture(autouse=True)
def small_data(monkeypatch):
    """256 images: an epoch takes a fraction of a second even on a loaded 2-core machine."""
    monkeypatch.setattr(checks, "decode_heavy", lambda: lesson.decode_heavy(256))


@pytest.fixture
def busy(monkeypatch):
    """The parallel-capacity probe reports a busy machine: speed is not graded, so a test of
    the loader's settings does not spend time on timing."""
    monkeypatch.setattr(checks, "parallel_speedup", lambda: 1.0)


def part(result, name):
    return next(p for p in result.parts if p.name == name)


# --- exercise 1: profile -------------------------------------------------------------------


def test_profile_check_passes_the_reference_profiler():
    assert lesson.check_profile(lesson.reference_profile).status == "passed"


def test_profile_check_passes_a_dict_and_time_monotonic():
    def monotonic(loader, step, synchronize):
        data_s = compute_s = 0.0
        synchronize()
        t0 = time.monotonic()
        for x, y in loader:
            t1 = time.monotonic()
            step(x, y)
            synchronize()
            t2 = time.monotonic()
            data_s, compute_s, t0 = data_s + t1 - t0, compute_s + t2 - t1, t2
        return {"data_s": data_s + time.monotonic() - t0, "compute_s": compute_s}

    assert status_of(lesson.check_profile, monotonic) == "passed"


def profile(loader, step, synchronize):
    data_s = compute_s = 0.0
    synchronize()
    t0 = time.perf_counter()
    for x, y in loader:
        t1 = time.perf_counter()
        step(x, y)
        synchronize()
        t2 = time.perf_counter()
        data_s, compute_s, t0 = data_s + t1 - t0, compute_s + t2 - t1, t2
    return lesson.EpochProfile(data_s + time.perf_counter() - t0, compute_s)


def no_sync(loader, step, synchronize):
    return profile(loader, step, lambda: None)


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


def swapped(loader, step, synchronize):
    p = profile(loader, step, synchronize)
    return lesson.EpochProfile(p.compute_s, p.data_s)


def wait_counted_from_the_step_start(loader, step, synchronize):
    data_s = compute_s = 0.0
    t0 = time.perf_counter()
    for x, y in loader:
        t1 = time.perf_counter()
        data_s += t1 - t0
        t0 = time.perf_counter()  # the clock restarts before the step: the step counts as waiting
        step(x, y)
        synchronize()
        compute_s += time.perf_counter() - t0
    return lesson.EpochProfile(data_s, compute_s)


@pytest.mark.parametrize(
    "wrong, cause",
    [
        (no_sync, "synchronize()"),
        (cpu_time, "perf_counter"),
        (swapped, "swapped"),
        (wait_counted_from_the_step_start, "waiting is from the end of a step"),
    ],
)
def test_profile_check_fails_no_sync_cpu_time_swapped_and_double_counting(wrong, cause):
    exc = failure(lesson.check_profile, wrong)
    assert exc.status == "failed" and cause in exc.summary


def test_profile_check_blames_only_the_missing_synchronisation_in_both_scenarios():
    exc = failure(lesson.check_profile, no_sync)
    scenarios = exc.summary.count(" step: yours")  # the 2 of SCENARIOS and "slow start and end"
    assert scenarios == 3 and exc.summary.count("synchronize()") == scenarios
    assert "perf_counter" not in exc.summary


def test_profile_check_not_attempted_and_reference_refused():
    assert fails(lesson.check_profile, not_attempted) == "not-attempted"
    assert fails(lesson.check_profile, lambda *a: lesson.reference_profile(*a)) == "failed"


def test_epoch_profile_calls_a_step_data_bound_when_it_waits_longer_than_it_computes():
    assert lesson.EpochProfile(0.6, 0.4).data_bound
    assert not lesson.EpochProfile(0.4, 0.6).data_bound
    assert lesson.EpochProfile(0.0, 0.0).data_fraction == 0.0


# --- exercise 2: fix the loader ------------------------------------------------------------


def fast(dataset, batch_size, device, **overrides):
    kwargs = dict(
        batch_size=batch_size,
        shuffle=True,
        num_workers=2,
        persistent_workers=True,
        pin_memory=device.type == "cuda",
    )
    return DataLoader(dataset, **{**kwargs, **overrides})


def batch_sampler_loader(dataset, batch_size, device):
    """A valid alternative: reshuffling through a BatchSampler over a RandomSampler."""
    sampler = BatchSampler(RandomSampler(dataset), batch_size, drop_last=False)
    return DataLoader(
        dataset,
        batch_sampler=sampler,
        num_workers=1,
        persistent_workers=True,
        pin_memory=device.type == "cuda",
    )


def test_fast_loader_passes_and_leaves_no_workers_behind(busy):
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    result = lesson.check_fast_loader(fast)
    assert result.status == "passed"
    assert part(result, "speed").status == "not-applicable"
    left = [
        p
        for p in psutil.Process().children(recursive=True)
        if p.pid not in before and p.is_running()
    ]
    assert not left, "the check leaves no worker processes behind"


def test_fast_loader_passes_a_batch_sampler_that_reshuffles(busy):
    assert lesson.check_fast_loader(batch_sampler_loader).status == "passed"


def test_fast_loader_keeps_workers_when_another_worker_serves_the_next_epoch(busy, monkeypatch):
    """One batch per epoch: persistent workers take turns, and that is not a restart."""
    monkeypatch.setattr(checks, "decode_heavy", lambda: lesson.decode_heavy(64))
    assert part(lesson.check_fast_loader(fast), "workers kept").status == "passed"


def test_fast_loader_grades_speed_when_two_cores_are_free(monkeypatch):
    """With the probe reporting two free cores, one worker (no parallelism) is too slow."""
    monkeypatch.setattr(checks, "parallel_speedup", lambda: 2.0)
    monkeypatch.setattr(checks, "decode_heavy", lambda: lesson.decode_heavy(96))
    exc = failure(lesson.check_fast_loader, lambda d, b, dev: fast(d, b, dev, num_workers=1))
    needed = 1 + checks.GAIN_SHARE * (2.0 - 1)  # the share of the probe's gain two workers owe
    assert exc.status == "failed" and f"below the {needed:g}x expected" in exc.summary


def lambda_collate(dataset, batch_size, device):
    collate = lambda batch: default_collate(batch)  # noqa: E731
    return fast(dataset, batch_size, device, collate_fn=collate)


def pins_every_batch(dataset, batch_size, device):
    collate = lambda batch: [t.pin_memory() for t in default_collate(batch)]  # noqa: E731
    return fast(dataset, batch_size, device, collate_fn=collate, pin_memory=False)


def same_order_every_epoch(dataset, batch_size, device):
    order = torch.randperm(len(dataset)).tolist()  # shuffled once, then never again
    return fast(dataset, batch_size, device, shuffle=False, sampler=order)


@pytest.mark.parametrize(
    "wrong, cause",
    [
        (
            lambda d, b, dev: fast(d, b, dev, num_workers=0, persistent_workers=False),
            "main process",
        ),
        (lambda d, b, dev: fast(d, b, dev, persistent_workers=False), "persistent_workers=True"),
        (
            lambda d, b, dev: fast(d, b, dev, num_workers=(os.cpu_count() or 2) + 2),
            "more workers than CPUs",
        ),
        (
            lambda d, b, dev: fast(d, b, dev, pin_memory=torch.cuda.is_available()),
            "pin_memory=False",
        ),
        (lambda d, b, dev: fast(d, b, dev, shuffle=False), "same order"),
        (same_order_every_epoch, "same order"),
        (lambda_collate, "lambda"),
        (pins_every_batch, "pin"),
    ],
    ids=[
        "no-workers",
        "restarted",
        "too-many",
        "pin-hard-coded",
        "unshuffled",
        "fixed-permutation",
        "lambda-collate",
        "pins-per-batch",
    ],
)
def test_fast_loader_fails_each_fault_of_the_broken_loader(busy, wrong, cause):
    if torch.cuda.is_available() and "pin" in cause:
        pytest.skip("on a GPU machine a hard-coded pin_memory=True is right, and pinning works")
    exc = failure(lesson.check_fast_loader, wrong)
    assert exc.status == "failed" and cause in exc.summary


def test_fast_loader_not_attempted_and_reference_refused(busy):
    assert fails(lesson.check_fast_loader, not_attempted) == "not-attempted"
    assert fails(lesson.check_fast_loader, lambda *a: lesson.reference_fast_loader(*a)) == "failed"


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
    assert lesson.worker_knee(rows) in (0, 1)


def test_time_loader_times_the_first_batch_then_whole_epochs_after_an_untimed_one():
    """Start-up is the first batch alone; each timed epoch is a whole one, and the first epoch
    (which starts the workers) is not among them."""

    class Counted(lesson.SleepyData):
        reads = 0

        def __getitem__(self, i):
            Counted.reads += 1
            return super().__getitem__(i)

    data = Counted(16, 0.005)  # 4 batches of 4: about 20 ms a batch, 80 ms an epoch
    startup, epoch = lesson.time_loader(DataLoader(data, batch_size=4), epochs=2)
    assert 0.015 < startup < 0.5 and 0.07 < epoch < 2.0 and epoch > 2.5 * startup
    assert Counted.reads == 3 * 16  # the untimed first epoch, then two timed ones


def test_worker_knee_is_the_fewest_workers_within_ten_percent_of_the_fastest():
    rows = [{"num_workers": n, "epoch_s": t} for n, t in [(0, 2.0), (1, 1.2), (2, 1.05), (4, 1.0)]]
    assert lesson.worker_knee(rows) == 2


# --- exercise 3: the batch on the device ----------------------------------------------------


@functools.cache
def _stats(device, mean, std):
    """mean and std as (1, C, 1, 1) on `device`, made once per (device, mean, std)."""
    return (
        torch.tensor(mean, device=device).view(1, -1, 1, 1),
        torch.tensor(std, device=device).view(1, -1, 1, 1),
    )


def to_device(batch, device, mean, std):
    images, labels = batch
    images, labels = images.to(device, non_blocking=True), labels.to(device, non_blocking=True)
    m, s = _stats(images.device, tuple(mean), tuple(std))
    return (images.float() / 255 - m) / s, labels


def to_device_with_sub_div(batch, device, mean, std):
    """A valid alternative: normalise in place with Tensor.sub_/div_ and a dtype conversion."""
    images, labels = (t.to(device=device, non_blocking=True) for t in batch)
    m, s = _stats(torch.device(device), tuple(mean), tuple(std))
    return images.to(torch.float32).div_(255).sub_(m).div_(s), labels


def float_before_copy(batch, device, mean, std):
    images, labels = batch
    m, s = _stats(torch.device("cpu"), tuple(mean), tuple(std))
    images = (images.float() / 255 - m) / s
    return images.to(device, non_blocking=True), labels.to(device, non_blocking=True)


def pin_then_copy(batch, device, mean, std):
    images, labels = (t.pin_memory() for t in batch)
    return to_device((images, labels), device, mean, std)


def blocking(batch, device, mean, std):
    images, labels = (t.to(device) for t in batch)
    m, s = _stats(images.device, tuple(mean), tuple(std))
    return (images.float() / 255 - m) / s, labels


def no_255(batch, device, mean, std):
    images, labels = (t.to(device, non_blocking=True) for t in batch)
    m, s = _stats(images.device, tuple(mean), tuple(std))
    return (images.float() - m) / s, labels


def cifar_constants(batch, device, mean, std):
    return to_device(batch, device, CIFAR_MEAN, CIFAR_STD)


def constants_per_batch(batch, device, mean, std):
    """Mean and std made on the device from Python values on every batch (as torchvision's
    Normalize does): a blocking copy per batch, each a stream synchronisation on a GPU."""
    images, labels = (t.to(device, non_blocking=True) for t in batch)
    m = torch.tensor(mean, device=images.device).view(1, -1, 1, 1)
    s = torch.tensor(std, device=images.device).view(1, -1, 1, 1)
    return (images.float() / 255 - m) / s, labels


_HOST = {}


def constants_moved_per_batch(batch, device, mean, std):
    """Mean and std kept on the host, once, and moved to the device on every batch."""
    images, labels = (t.to(device, non_blocking=True) for t in batch)
    key = (tuple(mean), tuple(std))
    if key not in _HOST:
        _HOST[key] = [torch.tensor(v).view(1, -1, 1, 1) for v in key]
    m, s = (t.to(images.device) for t in _HOST[key])
    return (images.float() / 255 - m) / s, labels


_BY_DEVICE = {}


def constants_keyed_by_device(batch, device, mean, std):
    """Made once per device, but the first call's mean and std kept for every later one."""
    images, labels = (t.to(device, non_blocking=True) for t in batch)
    if images.device not in _BY_DEVICE:
        _BY_DEVICE[images.device] = _stats(images.device, tuple(mean), tuple(std))
    m, s = _BY_DEVICE[images.device]
    return (images.float() / 255 - m) / s, labels


def python_floats(batch, device, mean, std):
    """Valid: per-channel Python floats, no tensor of constants at all."""
    images, labels = (t.to(device, non_blocking=True) for t in batch)
    images = images.float().div_(255)
    for c, (m, s) in enumerate(zip(mean, std, strict=True)):
        images[:, c].sub_(m).div_(s)
    return images, labels


def copied_twice(batch, device, mean, std):
    batch[0].to(device, non_blocking=True)  # a copy thrown away
    return to_device(batch, device, mean, std)


def scale_kept(batch, device, mean, std):
    images, labels = (t.to(device, non_blocking=True) for t in batch)
    m, s = _stats(images.device, tuple(mean), tuple(std))
    return (images.float() - 255 * m) / s, labels


@pytest.mark.parametrize(
    "wrong, cause",
    [
        (constants_per_batch, "on the second batch your function copied 2 tensor(s) besides"),
        (constants_moved_per_batch, "a sync per batch"),
        (constants_keyed_by_device, "normalised with the first call's mean and std"),
        (copied_twice, "the images crossed 4 times for 2 batches"),
        (float_before_copy, "the images crossed as float32"),
        (scale_kept, "255 times ToTensor + Normalize's"),
    ],
    ids=["per-batch", "moved-per-batch", "keyed-by-device", "twice", "float", "scale-kept"],
)
def test_transfer_names_only_causes_its_readings_confirm(wrong, cause):
    """Issue 34: a copy of the constants per batch was told "convert to float after the copy";
    each cause is now named from what the spy saw (the dtype and count of the batch's copies,
    the other tensors and the call they crossed in) or from the values themselves."""
    exc = failure(lesson.check_transfer, wrong)
    assert exc.status == "failed" and cause in exc.summary
    if wrong in (constants_per_batch, constants_moved_per_batch):
        assert "convert after the copy" not in exc.summary and "within the 385 KiB" in exc.summary


def converted_in_a_non_blocking_copy(batch, device, mean, std):
    """Valid: one non_blocking .to(device, float32): the uint8 batch crosses and converts on the
    device (ATen's copy_kernel_cuda: "If non_blocking is true - type conversions are performed
    on the GPU"; a blocking copy converts on the CPU first)."""
    images, labels = batch
    images = images.to(device, torch.float32, non_blocking=True).div_(255)
    for c, (m, s) in enumerate(zip(mean, std, strict=True)):
        images[:, c].sub_(m).div_(s)
    return images, labels.to(device, non_blocking=True)


@pytest.mark.parametrize(
    "answer", [to_device, to_device_with_sub_div, python_floats, converted_in_a_non_blocking_copy]
)
def test_transfer_passes_uint8_copies_normalised_on_the_device(answer):
    assert status_of(lesson.check_transfer, answer) == "passed"


@pytest.mark.parametrize(
    "wrong, cause",
    [
        (float_before_copy, "crossed as float32: convert on the device"),
        (pin_then_copy, "pinning is itself a copy"),
        (blocking, "blocking: the images and labels"),
        (lambda b, d, m, s: to_device(b, torch.device("cpu"), m, s), "use the `device` argument"),
        (no_255, "divide by 255"),
        (cifar_constants, "not with those passed in this call"),
    ],
    ids=["float-first", "pin-per-batch", "blocking", "hard-coded-device", "no-255", "constants"],
)
def test_transfer_fails_float_copies_pinning_blocking_fixed_device_and_wrong_values(wrong, cause):
    exc = failure(lesson.check_transfer, wrong)
    assert exc.status == "failed" and cause in exc.summary


def test_transfer_not_attempted_and_reference_refused():
    assert fails(lesson.check_transfer, not_attempted) == "not-attempted"
    assert fails(lesson.check_transfer, lambda *a: lesson.reference_to_device(*a)) == "failed"


def test_reference_transfer_keeps_mean_and_std_on_the_device_across_batches():
    """On CUDA, a tensor built from host values with device= is a blocking copy that waits
    for the images' non_blocking copy just queued. After the first batch the reference's
    only host-to-device work is the batch itself (meta device standing in for a GPU)."""
    from torch.overrides import TorchFunctionMode

    class HostToDevice(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.made, self.moved = 0, 0

        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            device = kwargs.get("device")
            if func in (torch.tensor, torch.as_tensor) and device not in (None, "cpu"):
                self.made += torch.device(device).type != "cpu"
            if getattr(func, "__name__", "") == "to" and isinstance(out, torch.Tensor):
                self.moved += args[0].device != out.device
            return out

    meta = torch.device("meta")
    batch = (torch.zeros(4, 3, 8, 8, dtype=torch.uint8), torch.arange(4))
    lesson.reference_to_device(batch, meta, (0.1, 0.2, 0.3), (0.4, 0.5, 0.6))
    with HostToDevice() as spy:
        for _ in range(3):
            lesson.reference_to_device(batch, meta, (0.1, 0.2, 0.3), (0.4, 0.5, 0.6))
    assert (spy.made, spy.moved) == (0, 6)  # images and labels, per batch


# --- the notebook: the measuring in plain sight ----------------------------------------------


def test_notebook_shows_the_code_of_its_measurements_and_the_reference_runs():
    """The sweep's and the copies' timing code is shown beside the call; where a CPU has no
    copy to time, a demo cell shows committed runs of other device classes."""
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "solutions" / "03_data_loading.ipynb"
    cells = json.loads(path.read_text())["cells"]
    code = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
    for shown, call in (("time_loader", "sweep_workers("), ("transfer_timings", "timings(")):
        assert any(f"cu.show_source(lesson.{shown})" in s and call in s for s in code), shown
    demos = [
        "".join(c["source"])
        for c in cells
        if "demo" in c["metadata"].get("tags", [])
        and "cu.reference_results(" in "".join(c["source"])
    ]
    assert demos and '"03_data_loading", exclude_class=cu.device_class()' in demos[0]


# --- judged outside the learner's kernel, as `course grade` does -----------------------------

TESTS = Path(__file__).resolve().parent
REFERENCE = "course_utils.lessons.data_loading.reference:"


@pytest.fixture
def importable(monkeypatch):
    """The learner's side (a child process) imports its answers from this test file."""
    monkeypatch.setenv("PYTHONPATH", str(TESTS))


def one_worker(dataset, batch_size, device):
    """Everything right but one worker: no faster than the main process on a loading epoch."""
    return fast(dataset, batch_size, device, num_workers=1)


@pytest.mark.parametrize(
    "check_id, reference, wrong, local",
    [
        ("03-profile", "reference_profile", no_sync, lesson.check_profile),
        ("03-fast-loader", "reference_fast_loader", lambda_collate, lesson.check_fast_loader),
        ("03-transfer", "reference_to_device", float_before_copy, lesson.check_transfer),
    ],
    ids=["03-profile", "03-fast-loader", "03-transfer"],
)
def test_judged_remotely_the_reference_passes_and_a_mistake_fails_as_in_a_notebook(
    busy, importable, check_id, reference, wrong, local
):
    """The check body in this process (the judge), every call to the answer in a child (the
    kernel) through probes: the reference passes, a red-team mistake gets its notebook verdict."""
    assert remote_verdict(check_id, REFERENCE + reference)["status"] == "passed"
    judged = remote_verdict(check_id, f"test_lesson_03:{wrong.__name__}")
    assert judged["status"] == status_of(local, wrong) == "failed", judged["message"]


def test_judged_remotely_the_loaders_epochs_are_timed_from_the_judge(monkeypatch, importable):
    """With two free cores the judge times epochs of the loader kept in the kernel against
    num_workers=0 run in the judge; one worker is too slow, as in a notebook."""
    monkeypatch.setattr(checks, "parallel_speedup", lambda: 2.0)
    monkeypatch.setattr(checks, "decode_heavy", lambda: lesson.decode_heavy(96))
    judged = remote_verdict("03-fast-loader", "test_lesson_03:one_worker")
    speed = next(p for p in judged["parts"] if p["name"] == "speed")
    assert judged["status"] == "failed" and "below the" in speed["message"], judged["message"]
