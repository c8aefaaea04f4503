"""Lesson 03's check of exercise 3, 03-transfer: the batch on the device. It compares the
values that arrived with ToTensor + Normalize computed here, and reads what the probes
(readings.py) recorded around the learner's function: the bytes that crossed, the pinning
and the non_blocking copies, on a stand-in device where this machine has no GPU."""

from __future__ import annotations

import torch

from ...checks import at_most, check, correct
from ...data import CIFAR_MEAN, CIFAR_STD
from ...device import get_device
from ...probes import observe, specimen_rng
from .demo import cpu_pipeline
from .probes import stand_in_part, uint8_batch
from .readings import transfer_on_meta, transfer_output

# the second batch: (its image size, its mean and std), the first in a notebook; the judge
# draws one per run (every one far from the CIFAR constants, and no size equal to 3 channels)
OTHER_BATCHES = (
    (7, (0.5, 0.4, 0.3), (0.2, 0.25, 0.3)),
    (5, (0.3, 0.6, 0.45), (0.15, 0.35, 0.2)),
    (9, (0.7, 0.2, 0.55), (0.3, 0.1, 0.25)),
)


def _images(out):
    """The images of what to_device returned: the first of a pair, else None."""
    return out[0] if isinstance(out, tuple | list) and len(out) == 2 else None


@check(
    "03-transfer",
    points=2,
    hint="Reread Exercise 3: compare a batch's bytes before and after ToTensor, decide which "
    "form crosses to the device and where the arithmetic runs, and read the non_blocking / "
    "pin_memory tutorial on which copies are asynchronous and what pinning costs. Use the "
    "device you are given.",
    in_kernel="the bytes that cross to the device, the pin_memory() calls, each copy's pinning "
    "and non_blocking flag, and on the meta stand-in the device faults seen (reads back to "
    "the host, tensors on two devices) are recorded around the learner's function",
)
def check_transfer(to_device) -> list:
    device = get_device()
    want = cpu_pipeline()[1]  # the lesson's images through ToTensor + Normalize, here
    seen = observe(transfer_output, to_device, str(device), None, CIFAR_MEAN, CIFAR_STD)
    out, images = seen["out"], _images(seen["out"])
    ok = (
        isinstance(images, torch.Tensor)
        and images.dtype == torch.float32
        and images.shape == want.shape
    )
    err = (images.cpu() - want).abs().max().item() if ok else float("inf")
    got = f"{getattr(images, 'dtype', getattr(out, 'type_name', type(out).__name__))}"
    parts = [
        at_most(
            "values",
            err,
            1e-4,
            f"largest difference from ToTensor + Normalize on {device} "
            f"(got {got} {tuple(getattr(images, 'shape', ()))})"
            + (": about 255x too large, divide by 255 first" if 50 < err < 2000 else ""),
        )
    ]
    size, mean, std = specimen_rng().choice(OTHER_BATCHES)
    other = observe(transfer_output, to_device, str(device), size, mean, std)
    x, _ = uint8_batch(16, size)
    mine = other["out"][0]
    diff = (mine.cpu().float() - _normalised(x, mean, std)).abs().max().item()
    why = ": use the mean and std you are given" if diff > 1e-4 and err <= 1e-4 else ""
    parts.append(
        at_most(
            "any size, mean and std",
            diff,
            1e-4,
            f"{size}x{size} images, another mean and std: largest difference{why}",
        )
    )
    pins = int(seen["pins"]) + int(other["pins"])
    return [*parts, *_copies(observe(transfer_on_meta, to_device), pins)]


def _normalised(x: torch.Tensor, mean, std) -> torch.Tensor:
    """ToTensor + Normalize of a uint8 NCHW batch, on the CPU: the values to match."""
    mean, std = (torch.tensor(v, dtype=torch.float32).view(1, -1, 1, 1) for v in (mean, std))
    return (x.float() / 255 - mean) / std


def _copies(seen: dict, pins_before: int = 0) -> list:
    """On the meta device (a stand-in for a GPU on any machine), from transfer_on_meta's
    readings: where the results land, the bytes that cross, per-batch pinning, and
    non_blocking from (simulated) pinned memory."""
    meta = seen["meta"]
    if "raised" in meta:
        unseen = "where the batch goes, the bytes that cross, pinning and non_blocking"
        return [stand_in_part("on the device given", meta["raised"], meta["faults"], unseen)]
    cuda_pins, cuda_copies, cuda_error = _as_cuda(seen.get("cuda"))
    pins = int(meta["pins"]) + pins_before + cuda_pins
    stray = sorted(
        {
            what
            for devices in meta["devices"]
            for what, kind in zip(("images", "labels"), devices, strict=False)
            if kind != "meta"
        }
    )
    placed = not stray
    uint8_bytes = 2 * sum(t.nbytes for t in uint8_batch())
    copies = [(bool(p), bool(nb)) for p, nb in meta["copies"]]
    sources = [str(s) for s in meta["sources"]]
    crossed = int(meta["crossed_bytes"])
    from_pinned = [nb for was_pinned, nb in copies + cuda_copies if was_pinned]
    blocking = sorted({what for (p, nb), what in zip(copies, sources, strict=True) if p and not nb})
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
            crossed / 2**10,
            uint8_bytes / 2**10,
            "KiB that crossed to the device for two batches (uint8 images + labels)"
            + (
                ": convert to float after the copy, a quarter of the bytes"
                if crossed > uint8_bytes
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


def _as_cuda(seen: dict | None) -> tuple[int, list, list]:
    """The learner's function asked for device `cuda`, run on the meta stand-in (for code
    that decides from `device.type`): its per-batch pin_memory() calls, its copies from
    pinned memory, and a failed or not-applicable part if it raised. None: this machine has a
    GPU, and the first run of the check used it."""
    if seen is None:
        return 0, [], []
    if "raised" in seen:  # the learner's fault if a device fault was seen, else the stand-in's
        unseen = "pinning and non_blocking with device cuda"
        return 0, [], [stand_in_part("asked for cuda", seen["raised"], seen["faults"], unseen)]
    return int(seen["pins"]), [(bool(p), bool(nb)) for p, nb in seen["copies"]], []
