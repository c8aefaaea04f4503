"""Red team, notebook 03 (data_loading): wrong and valid answers written from the notebook alone."""

from __future__ import annotations

import functools
import time

import pytest
import torch
from redteam_helpers import FULL, assert_verdict, in_ci, run_check
from torch.utils.data import BatchSampler, DataLoader, RandomSampler, default_collate

from course_utils.lessons import data_loading as lesson

# --- 03-profile: profile_epoch(loader, step, synchronize) -> EpochProfile(data_s, compute_s) -


def _profile(
    loader,
    step,
    synchronize,
    *,
    clock=time.perf_counter,
    sync_after=True,
    sync_before_batch=False,
    last_wait=True,
    first_wait=True,
    swap=False,
):
    """The profiler with one switch per mistake (the defaults are a correct profiler)."""
    data_s = compute_s = 0.0
    batches = 0
    synchronize()
    t0 = clock()
    iterator = iter(loader)
    if not first_wait:
        first = next(iterator)
        t0 = clock()
        iterator = iter([first, *iterator])
    for x, y in iterator:
        if sync_before_batch:
            synchronize()
        t1 = clock()
        step(x, y)
        if sync_after:
            synchronize()
        t2 = clock()
        data_s += t1 - t0
        compute_s += t2 - t1
        batches += 1
        t0 = t2
    if last_wait:
        data_s += clock() - t0
    if swap:
        data_s, compute_s = compute_s, data_s
    return lesson.EpochProfile(data_s, compute_s, batches)


def prof_no_sync(loader, step, synchronize):
    return _profile(loader, step, synchronize, sync_after=False)


def prof_sync_when_batch_arrives(loader, step, synchronize):
    return _profile(loader, step, synchronize, sync_after=False, sync_before_batch=True)


def prof_no_last_wait(loader, step, synchronize):
    return _profile(loader, step, synchronize, last_wait=False)


def prof_no_first_wait(loader, step, synchronize):
    return _profile(loader, step, synchronize, first_wait=False)


def prof_process_time(loader, step, synchronize):
    return _profile(loader, step, synchronize, clock=time.process_time)


def prof_swapped(loader, step, synchronize):
    return _profile(loader, step, synchronize, swap=True)


def prof_total_minus_compute(loader, step, synchronize):
    """Valid: the whole epoch timed once; waiting is what the synchronised steps did not use."""
    synchronize()
    start = time.monotonic()
    compute_s, batches = 0.0, 0
    for x, y in loader:
        t = time.monotonic()
        step(x, y)
        synchronize()
        compute_s += time.monotonic() - t
        batches += 1
    total = time.monotonic() - start
    return lesson.EpochProfile(data_s=total - compute_s, compute_s=compute_s, batches=batches)


def prof_explicit_next(loader, step, synchronize):
    """Valid: next() timed on its own, StopIteration's wait included; lists summed at the end."""
    waits, steps = [], []
    iterator = iter(loader)
    synchronize()
    while True:
        t = time.perf_counter()
        try:
            x, y = next(iterator)
        except StopIteration:
            waits.append(time.perf_counter() - t)
            break
        waits.append(time.perf_counter() - t)
        t = time.perf_counter()
        step(x, y)
        synchronize()
        steps.append(time.perf_counter() - t)
    return lesson.EpochProfile(data_s=sum(waits), compute_s=sum(steps), batches=len(steps))


PROFILE = [
    pytest.param(prof_no_sync, "failed", r"synchron", (), id="wrong-no-sync"),
    pytest.param(
        prof_sync_when_batch_arrives,
        "failed",
        r"synchron|after (the )?step",
        (),
        id="wrong-sync-before-step-not-after",
    ),
    pytest.param(
        prof_no_last_wait,
        "failed",
        r"last|end|after the last",
        (r"synchron",),
        id="wrong-misses-last-wait",
    ),
    pytest.param(
        prof_no_first_wait, "failed", r"first", (r"synchron",), id="wrong-misses-first-wait"
    ),
    pytest.param(
        prof_process_time,
        "failed",
        r"wall|process_time|perf_counter|CPU time",
        (),
        id="wrong-process-time",
    ),
    pytest.param(
        prof_swapped,
        "failed",
        r"swap|the other way|exchanged|reversed",
        (r"synchron",),
        id="wrong-fields-swapped",
    ),
    pytest.param(prof_total_minus_compute, "passed", None, (), id="valid-total-minus-compute"),
    pytest.param(prof_explicit_next, "passed", None, (), id="valid-explicit-next"),
]


@pytest.mark.parametrize("fn, expected, cause, not_causes", PROFILE)
def test_profile(fn, expected, cause, not_causes):
    assert_verdict(run_check(lesson.check_profile, fn), expected, cause, not_causes)


# --- 03-fast-loader: make_fast_loader(dataset, batch_size, device) -> DataLoader -----------

NUM_WORKERS = 2  # "from the sweep" on 2 free cores; 1 cannot beat num_workers=0 when timed


def _loader(dataset, batch_size, device, **changes):
    kwargs = dict(
        batch_size=batch_size,
        shuffle=True,
        num_workers=NUM_WORKERS,
        persistent_workers=True,
        pin_memory=device.type == "cuda",
    )
    kwargs.update(changes)
    return DataLoader(dataset, **kwargs)


def pinning_collate(batch, pin):
    out = default_collate(batch)
    return [t.pin_memory() for t in out] if pin else out


class PinningCollate:
    def __init__(self, pin):
        self.pin = pin

    def __call__(self, batch):
        return pinning_collate(batch, self.pin)


def fast_not_persistent(dataset, batch_size, device):
    return _loader(dataset, batch_size, device, persistent_workers=False)


def fast_no_shuffle(dataset, batch_size, device):
    return _loader(dataset, batch_size, device, shuffle=False)


def fast_no_workers(dataset, batch_size, device):
    return _loader(dataset, batch_size, device, num_workers=0, persistent_workers=False)


def fast_lambda_collate(dataset, batch_size, device):
    return _loader(dataset, batch_size, device, collate_fn=lambda b: default_collate(b))


def fast_never_pins(dataset, batch_size, device):
    return _loader(dataset, batch_size, device, pin_memory=False)


def fast_pins_in_workers(dataset, batch_size, device):
    return _loader(dataset, batch_size, device, collate_fn=PinningCollate(device.type == "cuda"))


def fast_drop_last(dataset, batch_size, device):
    return _loader(dataset, batch_size, device, drop_last=True)


def fast_four_workers_rule(dataset, batch_size, device):
    workers = 4 * max(1, torch.cuda.device_count())  # the folklore, "fixed" for no GPU
    return _loader(dataset, batch_size, device, num_workers=workers)


def fast_batch_sampler(dataset, batch_size, device):
    """Valid: an explicit RandomSampler in a BatchSampler; pins for any accelerator."""
    sampler = BatchSampler(RandomSampler(dataset), batch_size=batch_size, drop_last=False)
    return DataLoader(
        dataset,
        batch_sampler=sampler,
        num_workers=NUM_WORKERS,
        persistent_workers=True,
        pin_memory=device.type != "cpu",
        prefetch_factor=4,
    )


def fast_usable_cpus(dataset, batch_size, device):
    """Valid from 3 usable CPUs on (see its test): every usable CPU but one, at least one; a
    seeded generator; the default collate."""
    workers = max(1, min(2, lesson.usable_cpus() - 1))
    return DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=True,
        num_workers=workers,
        persistent_workers=workers > 0,
        pin_memory=str(device).startswith("cuda"),
        collate_fn=default_collate,
        generator=torch.Generator().manual_seed(0),
    )


FAST_LOADER = [
    pytest.param(
        fast_not_persistent,
        "failed",
        r"persistent|restart|same (worker|process)",
        (),
        id="wrong-not-persistent",
    ),
    pytest.param(
        fast_no_shuffle, "failed", r"order|shuffle", (r"persistent|pickl",), id="wrong-no-shuffle"
    ),
    pytest.param(
        fast_no_workers, "failed", r"worker|main process", (r"pickl",), id="wrong-no-workers"
    ),
    pytest.param(
        fast_lambda_collate,
        "failed",
        r"pickl|spawn|lambda",
        (r"persistent",),
        id="wrong-lambda-collate",
    ),
    pytest.param(fast_never_pins, "failed", r"pin", (r"pickl|persistent",), id="wrong-never-pins"),
    pytest.param(
        fast_pins_in_workers,
        "failed",
        r"pin",
        (r"pickl|persistent",),
        id="wrong-pins-in-worker-collate",
    ),
    pytest.param(
        fast_drop_last,
        "failed",
        r"every image|once|drop_last|missing",
        (r"pickl",),
        id="wrong-drop-last",
    ),
    pytest.param(
        fast_four_workers_rule,
        "failed",
        r"CPU|core|too many",
        (r"pickl",),
        id="wrong-four-workers-rule",
    ),
    pytest.param(fast_batch_sampler, "passed", None, (), id="valid-batch-sampler"),
]
FAST_LOADER = in_ci(
    FAST_LOADER,
    {
        "valid-batch-sampler",
        "wrong-drop-last",
        "wrong-not-persistent",
        "wrong-pins-in-worker-collate",
    },
)


@pytest.mark.parametrize("fn, expected, cause, not_causes", FAST_LOADER)
def test_fast_loader(fn, expected, cause, not_causes):
    assert_verdict(run_check(lesson.check_fast_loader, fn), expected, cause, not_causes)


@pytest.mark.skipif(not FULL, reason="slow red-team case: COURSE_REDTEAM=all runs it")
def test_fast_loader_every_cpu_but_one_depends_on_the_cores():
    """Every usable CPU but one gives 2 workers from 3 CPUs on: valid. On 2 CPUs it gives 1,
    and one worker cannot speed up the check's epoch, which only loads (0.9x measured against
    1.2x or more required on an idle 2-core machine): where two cores are free the sweep the notebook
    asks for shows 2 faster, so the speed part fails it and says why; where they are not, the
    speed part is not timed and the loader passes (README: 03-fast-loader)."""
    verdict = run_check(lesson.check_fast_loader, fast_usable_cpus)
    if lesson.usable_cpus() >= 3:
        assert_verdict(verdict, "passed")
    elif verdict.status != "passed":
        assert_verdict(verdict, "failed", r"num_workers=1", (r"pickl|persistent|pin",))


# --- 03-transfer: to_device(batch, device, mean, std) -> (float32 images, labels) on device -


def _stats(mean, std, like):
    """Issue 34: the notebook gave these cases `stats_on`, which made mean and std on the
    device once; the exercise now asks where they live, so this stand-in caches as it did and
    each case keeps the one fault it was written for."""
    return _stats_on(like.device, tuple(mean), tuple(std))


@functools.cache
def _stats_on(device, mean, std):
    shape = (1, -1, 1, 1)
    mean = torch.as_tensor(mean, dtype=torch.float32, device=device).view(shape)
    std = torch.as_tensor(std, dtype=torch.float32, device=device).view(shape)
    return mean, std


def tx_float_on_host(batch, device, mean, std):
    images, labels = batch
    mean_t, std_t = _stats(mean, std, images)
    images = (images.float() / 255 - mean_t) / std_t
    return images.to(device, non_blocking=True), labels.to(device, non_blocking=True)


def tx_blocking(batch, device, mean, std):
    images, labels = batch
    images, labels = images.to(device), labels.to(device)
    mean_t, std_t = _stats(mean, std, images)
    return (images.float() / 255 - mean_t) / std_t, labels


def tx_pins_per_batch(batch, device, mean, std):
    images, labels = batch
    images = images.pin_memory().to(device, non_blocking=True)
    labels = labels.pin_memory().to(device, non_blocking=True)
    mean_t, std_t = _stats(mean, std, images)
    return (images.float() / 255 - mean_t) / std_t, labels


def tx_pins_when_cuda(batch, device, mean, std):
    images, labels = batch
    if device.type == "cuda":  # the guard a stand-in device could defeat
        images, labels = images.pin_memory(), labels.pin_memory()
    images = images.to(device, non_blocking=True)
    labels = labels.to(device, non_blocking=True)
    mean_t, std_t = _stats(mean, std, images)
    return (images.float() / 255 - mean_t) / std_t, labels


def tx_labels_stay(batch, device, mean, std):
    images, labels = batch
    images = images.to(device, non_blocking=True)
    mean_t, std_t = _stats(mean, std, images)
    return (images.float() / 255 - mean_t) / std_t, labels


def tx_labels_blocking_as_tensor(batch, device, mean, std):
    images, labels = batch
    images = images.to(device, non_blocking=True)
    labels = torch.as_tensor(labels, device=device)  # a blocking copy
    mean_t, std_t = _stats(mean, std, images)
    return (images.float() / 255 - mean_t) / std_t, labels


def tx_no_scale(batch, device, mean, std):
    images, labels = batch
    images = images.to(device, non_blocking=True)
    mean_t, std_t = _stats(mean, std, images)
    return (images.float() - mean_t) / std_t, labels.to(device, non_blocking=True)


def tx_scale_last(batch, device, mean, std):
    images, labels = batch
    images = images.to(device, non_blocking=True)
    mean_t, std_t = _stats(mean, std, images)
    return (images.float() - mean_t) / std_t / 255, labels.to(device, non_blocking=True)


def tx_half(batch, device, mean, std):
    images, labels = batch
    images = images.to(device, non_blocking=True)
    mean_t, std_t = _stats(mean, std, images)
    return ((images.half() / 255 - mean_t.half()) / std_t.half()), labels.to(
        device, non_blocking=True
    )


def tx_torchvision_v2(batch, device, mean, std):
    """Valid: torchvision's v2 functional ops on the device."""
    from torchvision.transforms.v2 import functional as F

    images, labels = batch
    images = images.to(device, non_blocking=True)
    images = F.to_dtype(images, torch.float32, scale=True)
    return F.normalize(images, mean=list(mean), std=list(std)), labels.to(device, non_blocking=True)


def tx_folded_constants_pinned_only(batch, device, mean, std):
    """Valid: non_blocking exactly when the source is pinned; /255 folded into the constants;
    in-place arithmetic on the fresh float tensor."""
    images, labels = batch
    images = images.to(device, non_blocking=images.is_pinned())
    labels = labels.to(device, non_blocking=labels.is_pinned())
    scale = torch.tensor([255.0 * s for s in std], device=images.device).view(1, -1, 1, 1)
    shift = torch.tensor([255.0 * m for m in mean], device=images.device).view(1, -1, 1, 1)
    return images.float().sub_(shift).div_(scale), labels


def tx_torchvision_v2_cached(batch, device, mean, std):
    """Valid (author-written, issue 34): torchvision's v2 ops, mean and std made on the
    device once and passed as tensors (as_tensor of a tensor already there copies nothing)."""
    from torchvision.transforms.v2 import functional as F

    images, labels = batch
    images = images.to(device, non_blocking=True)
    mean_t, std_t = _stats(mean, std, images)
    images = F.to_dtype(images, torch.float32, scale=True)
    return F.normalize(images, mean=mean_t.view(-1), std=std_t.view(-1)), labels.to(
        device, non_blocking=True
    )


def tx_folded_constants_cached(batch, device, mean, std):
    """Valid (author-written, issue 34): the folded-constants case with its constants made
    on the device once per (device, mean, std)."""
    images, labels = batch
    images = images.to(device, non_blocking=images.is_pinned())
    labels = labels.to(device, non_blocking=labels.is_pinned())
    shift, scale = _stats_on(
        images.device, tuple(255.0 * m for m in mean), tuple(255.0 * s for s in std)
    )
    return images.float().sub_(shift).div_(scale), labels


TRANSFER = [
    pytest.param(
        tx_float_on_host,
        "failed",
        r"bytes|uint8|float32 (crossed|sent)|four times",
        (),
        id="wrong-float-on-host",
    ),
    pytest.param(
        tx_blocking,
        "failed",
        r"non_blocking|asynchron",
        (r"pin_memory\(\) call",),
        id="wrong-blocking-copies",
    ),
    pytest.param(tx_pins_per_batch, "failed", r"pin", (r"bytes",), id="wrong-pins-per-batch"),
    pytest.param(tx_pins_when_cuda, "failed", r"pin", (r"bytes",), id="wrong-pins-when-cuda"),
    pytest.param(tx_labels_stay, "failed", r"label", (r"pin",), id="wrong-labels-stay-on-host"),
    pytest.param(
        tx_labels_blocking_as_tensor,
        "failed",
        r"blocking: the labels",
        (r"pin_memory\(\) call",),
        id="wrong-labels-blocking-as-tensor",
    ),
    pytest.param(
        tx_no_scale, "failed", r"255|scale|value", (r"pin|non_blocking",), id="wrong-no-255"
    ),
    pytest.param(
        tx_scale_last,
        "failed",
        r"255|value|differ",
        (r"pin|non_blocking",),
        id="wrong-divides-by-255-last",
    ),
    pytest.param(
        tx_half, "failed", r"float32|float16|dtype", (r"pin|non_blocking",), id="wrong-float16"
    ),
    # issue 34: the exercise now asks where mean and std live; both cases make them on the
    # device on every batch (a blocking copy each), so they became wrong (README, issue 34)
    pytest.param(
        tx_torchvision_v2,
        "failed",
        r"second batch.*per batch",
        (r"bytes|255",),
        id="wrong-torchvision-v2-constants-per-batch",
    ),
    pytest.param(
        tx_folded_constants_pinned_only,
        "failed",
        r"second batch.*per batch",
        (r"bytes|255|pin_memory\(\) call",),
        id="wrong-folded-constants-made-per-batch",
    ),
    pytest.param(tx_torchvision_v2_cached, "passed", None, (), id="valid-torchvision-v2-cached"),
    pytest.param(
        tx_folded_constants_cached, "passed", None, (), id="valid-folded-constants-cached"
    ),
]


@pytest.mark.parametrize("fn, expected, cause, not_causes", TRANSFER)
def test_transfer(fn, expected, cause, not_causes):
    assert_verdict(run_check(lesson.check_transfer, fn), expected, cause, not_causes)
