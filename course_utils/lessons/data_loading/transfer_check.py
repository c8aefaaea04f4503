"""Lesson 03's check of exercise 3, 03-transfer: the batch on the device. It observes the
values that arrived, the bytes that crossed, the pinning and the non_blocking copies, on a
stand-in device where this machine has no GPU."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ...checks import (
    at_most,
    check,
    correct,
)
from ...data import CIFAR_MEAN, CIFAR_STD
from ...device import get_device
from .demo import (
    cpu_pipeline,
)
from .probes import (
    DeviceFaults,
    TransferSpy,
    stand_in_part,
    uint8_batch,
)

# --- exercise 3: the batch on the device ------------------------------------------------------------


@check(
    "03-transfer",
    points=2,
    hint="Reread Exercise 3: compare a batch's bytes before and after ToTensor, decide which "
    "form crosses to the device and where the arithmetic runs, and read the non_blocking / "
    "pin_memory tutorial on which copies are asynchronous and what pinning costs. Use the "
    "device you are given.",
)
def check_transfer(to_device: Callable) -> list:
    device = get_device()
    uint8, want = cpu_pipeline()
    spy = TransferSpy(simulate=device.type != "cuda")  # no pinned memory without a GPU: pretend
    with spy:
        out = to_device((uint8, torch.arange(len(uint8))), device, CIFAR_MEAN, CIFAR_STD)
    images = out[0] if isinstance(out, tuple | list) and len(out) == 2 else None
    ok = (
        isinstance(images, torch.Tensor)
        and images.dtype == torch.float32
        and images.shape == want.shape
    )
    err = (images.cpu() - want).abs().max().item() if ok else float("inf")
    parts = [
        at_most(
            "values",
            err,
            1e-4,
            f"largest difference from ToTensor + Normalize on {device} "
            f"(got {getattr(images, 'dtype', type(out).__name__)} {tuple(getattr(images, 'shape', ()))})"
            + (": about 255x too large, divide by 255 first" if 50 < err < 2000 else ""),
        )
    ]
    x, y = uint8_batch(16, 7)
    mean, std = (0.5, 0.4, 0.3), (0.2, 0.25, 0.3)
    with spy:
        got = to_device((x, y), device, mean, std)[0]
    diff = (got.cpu().float() - _normalised(x, mean, std)).abs().max().item()
    why = ": use the mean and std you are given" if diff > 1e-4 and err <= 1e-4 else ""
    parts.append(
        at_most(
            "any size, mean and std",
            diff,
            1e-4,
            f"7x7 images, another mean and std: largest difference{why}",
        )
    )
    return [*parts, *_copies(to_device, spy.pinned_pageable)]


def _normalised(x: torch.Tensor, mean, std) -> torch.Tensor:
    """ToTensor + Normalize of a uint8 NCHW batch, on the CPU: the values to match."""
    mean, std = (torch.tensor(v, dtype=torch.float32).view(1, -1, 1, 1) for v in (mean, std))
    return (x.float() / 255 - mean) / std


def _copies(to_device: Callable, pins_before: int = 0) -> list:
    """On the meta device (a stand-in for a GPU on any machine): where the results land, the
    bytes that cross, per-batch pinning, and non_blocking from (simulated) pinned memory."""
    meta, spy = torch.device("meta"), TransferSpy(simulate=True)
    pageable = uint8_batch()
    pinned = tuple(t.clone() for t in pageable)
    spy.pinned_ids.update(id(t) for t in pinned)
    faults = DeviceFaults()  # outside the spy: it sees the calls the spy passes on
    try:
        with faults, spy:
            outs = [to_device(b, meta, CIFAR_MEAN, CIFAR_STD) for b in (pageable, pinned)]
    except Exception as exc:
        unseen = "where the batch goes, the bytes that cross, pinning and non_blocking"
        return [stand_in_part("on the device given", exc, faults, unseen)]
    pins = spy.pinned_pageable + pins_before
    cuda_pins, cuda_copies, cuda_error = _as_cuda(to_device)
    pins += cuda_pins
    stray = sorted(
        {
            what
            for o in outs
            for what, t in zip(("images", "labels"), o, strict=False)
            if t.device.type != "meta"
        }
    )
    placed = not stray
    uint8_bytes = 2 * sum(t.nbytes for t in pageable)
    from_pinned = [nb for was_pinned, nb in spy.copies + cuda_copies if was_pinned]
    blocking = sorted(
        {what for (p, nb), what in zip(spy.copies, spy.sources, strict=True) if p and not nb}
    )
    return [
        correct(
            "on the device given",
            placed,
            "asked for another device, the batch went there"
            if placed
            else f"asked for another device, your {' and '.join(stray)} did not go there: use the "
            "`device` argument for both",
        ),
        at_most(
            "bytes copied",
            spy.crossed_bytes / 2**10,
            uint8_bytes / 2**10,
            "KiB that crossed to the device for two batches (uint8 images + labels)"
            + (
                ": convert to float after the copy, a quarter of the bytes"
                if spy.crossed_bytes > uint8_bytes
                else ""
            ),
            unit=" KiB",
        ),
        correct(
            "no pinning per batch",
            pins == 0,
            f"{pins} .pin_memory() call(s): pinning is itself a copy, often slower than a plain "
            ".to() (PyTorch's pin_memory tutorial); DataLoader(pin_memory=True) pins in a background thread"
            if pins
            else "no .pin_memory() calls",
        ),
        correct(
            "non_blocking from pinned memory",
            bool(from_pinned) and all(from_pinned),
            f"{sum(from_pinned)} of {len(from_pinned)} copies from pinned memory used non_blocking=True "
            "(the CPU queues the next work while the data travels)"
            + (f"; blocking: the {' and '.join(blocking)}" if blocking else "")
            if from_pinned
            else "no copy from pinned memory reached the device: copy the tensors you are given",
        ),
        *cuda_error,
    ]


def _as_cuda(to_device: Callable) -> tuple[int, list, list]:
    """Your function asked for device `cuda`, run on the meta stand-in (for code that decides
    from `device.type`): its per-batch pin_memory() calls and its copies from pinned memory."""
    if torch.cuda.is_available():
        return 0, [], []  # the first run of the check used the real GPU
    spy = TransferSpy(simulate=True, cuda_as="meta")
    pageable = uint8_batch()
    pinned = tuple(t.clone() for t in pageable)
    spy.pinned_ids.update(id(t) for t in pinned)
    cuda = torch.device("cuda")  # made outside the spy, which turns cuda devices into meta
    faults = DeviceFaults()  # outside the spy: it sees cuda already turned into meta
    try:
        with faults, spy:
            for batch in (pageable, pinned):
                to_device(batch, cuda, CIFAR_MEAN, CIFAR_STD)
    except Exception as exc:  # the learner's fault if a device fault was seen, else the stand-in's
        unseen = "pinning and non_blocking with device cuda"
        return 0, [], [stand_in_part("asked for cuda", exc, faults, unseen)]
    return spy.pinned_pageable, spy.copies, []
