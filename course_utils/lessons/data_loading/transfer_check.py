"""Lesson 03's check of exercise 3, 03-transfer: the batch on the device. It compares the
values that arrived with ToTensor + Normalize computed here, and reads what the probes
(readings.py) recorded around the learner's function: the bytes of the batch that crossed,
the pinning, the non_blocking copies, and what else crossed on each batch, on a stand-in
device where this machine has no GPU."""

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
    "form crosses to the device, where the arithmetic runs and where mean and std live (your "
    "function runs once per batch), and read the non_blocking / pin_memory tutorial on which "
    "copies are asynchronous and what pinning costs. Use the device you are given.",
    in_kernel="the bytes that cross to the device, the pin_memory() calls, each copy's pinning "
    "and non_blocking flag, and on the meta stand-in the device faults seen (reads back to "
    "the host, tensors on two devices) are recorded around the learner's function",
)
def check_transfer(to_device) -> list:
    """The values against ToTensor + Normalize, here; then, on the meta stand-in, where the
    batch lands, the bytes that cross and in which dtype, pinning, non_blocking, and what
    else crosses on each batch. # CHANGED in issue 34: the statistics' placement is the
    learner's decision now (the notebook no longer gives a cached `stats_on`): a copy of
    anything besides the batch on a later batch fails ("made once"); each message names a
    cause only where a reading confirms it (a stats copy no longer reads as "convert to float
    after the copy"; a cache that ignores mean and std is told so; "divide by 255" only when
    the values are x, not x / 255, normalised)."""
    device = get_device()
    x8, want = cpu_pipeline()  # the lesson's images, uint8 and through ToTensor + Normalize
    seen = observe(transfer_output, to_device, str(device), None, CIFAR_MEAN, CIFAR_STD)
    images = _images(seen["out"])
    err = _max_diff(images, want)
    parts = [
        _wrong_dtype("values", images, want)
        or at_most(
            "values",
            err,
            1e-4,
            f"largest difference from ToTensor + Normalize on {device} (got {_shown(seen['out'])})"
            + _values_diagnosis(images, x8, err),
        )
    ]
    size, mean, std = specimen_rng().choice(OTHER_BATCHES)
    other = observe(transfer_output, to_device, str(device), size, mean, std)
    x, _ = uint8_batch(16, size)
    mine = _images(other["out"])
    diff = _max_diff(mine, _normalised(x, mean, std))
    why = ""
    if diff > 1e-4 and err <= 1e-4:
        if _max_diff(mine, _normalised(x, CIFAR_MEAN, CIFAR_STD)) <= 1e-4:
            why = (
                ": your output for these images is normalised with the first call's mean and "
                "std (CIFAR's), not with those passed in this call: constants typed in, or "
                "statistics kept from an earlier call without mean and std in their key"
            )
        else:
            why = f" (got {_shown(other['out'])}): compare yours with (x / 255 - mean) / std here"
    parts.append(
        _wrong_dtype("any size, mean and std", mine, _normalised(x, mean, std))
        or at_most(
            "any size, mean and std",
            diff,
            1e-4,
            f"{size}x{size} images, another mean and std: largest difference{why}",
        )
    )
    pins = int(seen["pins"]) + int(other["pins"])
    return [*parts, *_copies(observe(transfer_on_meta, to_device), pins)]


def _wrong_dtype(name: str, images, want: torch.Tensor):
    """A failed part for floating images of the right shape in another dtype than float32,
    with how far their values are from `want`; None otherwise."""
    if not (
        isinstance(images, torch.Tensor)
        and images.is_floating_point()
        and images.dtype != torch.float32
        and tuple(images.shape) == tuple(want.shape)
    ):
        return None
    off = (images.detach().cpu().double() - want.double()).abs().max().item()
    return correct(
        name,
        False,
        f"your images are {str(images.dtype).removeprefix('torch.')}, their values within "
        f"{off:.2g} of ToTensor + Normalize's: return float32, the dtype of the model's weights "
        "(a float64 mean or std, from numpy or Python's double tensors, promotes the result)",
    )


def _shown(out) -> str:
    """What to_device returned, as a message shows it: the images' dtype and shape."""
    images = _images(out)
    if isinstance(images, torch.Tensor):
        return f"{str(images.dtype).removeprefix('torch.')} {tuple(images.shape)}"
    return getattr(out, "type_name", type(out).__name__)


def _max_diff(images, want: torch.Tensor) -> float:
    """Largest |images - want|, inf unless images is a float32 tensor of want's shape."""
    ok = (
        isinstance(images, torch.Tensor)
        and images.dtype == torch.float32
        and tuple(images.shape) == tuple(want.shape)
    )
    return (images.detach().cpu() - want).abs().max().item() if ok else float("inf")


def _values_diagnosis(images, x8: torch.Tensor, err: float) -> str:
    """The cause of wrong values, named only when the values confirm it: x normalised
    instead of x / 255, or the whole result 255 times too large (the 0-255 scale kept)."""
    if not err > 1e-4 or err == float("inf"):
        return ""
    unscaled = _normalised(x8, CIFAR_MEAN, CIFAR_STD, scale=1.0)
    if _max_diff(images, unscaled) <= 1e-4 * 255:
        return ": your values are (x - mean) / std of the 0-255 pixels: divide by 255 first"
    if _max_diff(images, 255 * _normalised(x8, CIFAR_MEAN, CIFAR_STD)) <= 1e-4 * 255:
        return ": your values are 255 times ToTensor + Normalize's: the 0-255 scale was kept"
    return ""


def _normalised(x: torch.Tensor, mean, std, scale: float = 255.0) -> torch.Tensor:
    """ToTensor + Normalize of a uint8 NCHW batch, on the CPU: the values to match (`scale`
    1: the same without ToTensor's division, to confirm that mistake)."""
    mean, std = (torch.tensor(v, dtype=torch.float32).view(1, -1, 1, 1) for v in (mean, std))
    return (x.float() / scale - mean) / std


def _copies(seen: dict, pins_before: int = 0) -> list:
    """On the meta device (a stand-in for a GPU on any machine), from transfer_on_meta's
    readings: where the results land, the bytes of the batch that cross (and in which dtype),
    per-batch pinning, non_blocking from (simulated) pinned memory, and what else crosses on
    the second batch (constants made once per device cross on the first only)."""
    meta = seen["meta"]
    if "raised" in meta:
        unseen = "where the batch goes, the bytes that cross, pinning and non_blocking"
        return [stand_in_part("on the device given", meta["raised"], meta["faults"], unseen)]
    cuda_pins, cuda_copies, cuda_others, cuda_error = _as_cuda(seen.get("cuda"))
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
            "KiB of the batch that crossed to the device for two batches (uint8 images + labels)"
            + (_bytes_diagnosis(meta) if crossed > uint8_bytes else ""),
            unit=" KiB",
        ),
        correct(
            "no pinning per batch",
            pins == 0,
            f"{pins} .pin_memory() call(s) on the batch: pinning is itself a copy, often slower "
            "than a plain .to() (PyTorch's pin_memory tutorial); DataLoader(pin_memory=True) "
            "pins in a background thread"
            if pins
            else "no .pin_memory() calls on the batch",
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
        _made_once([dict(o) for o in meta.get("others", [])], cuda_others),
        *cuda_error,
    ]


def _bytes_diagnosis(meta: dict) -> str:
    """Why more than the uint8 batch crossed, from what each of its copies arrived as."""
    dtypes = [str(d) for d in meta.get("dtypes", [])]
    sources = [str(s) for s in meta["sources"]]
    images = [d for d, s in zip(dtypes, sources, strict=False) if s == "images"]
    wide = sorted({d for d in images if d != "uint8"})
    if wide:
        return (
            f": the images crossed as {' and '.join(wide)}: convert on the device, a quarter of "
            "the bytes (after the copy, or in the same .to() with non_blocking=True, which "
            "converts on the device; a blocking .to() converts on the CPU first)"
        )
    if len(images) > 2:
        return f": the images crossed {len(images)} times for 2 batches: copy each batch once"
    return ": compare the bytes of each form a batch could cross in"


def _made_once(others: list[dict], cuda_others: list[dict]) -> object:
    """Tensors other than the batch (mean, std, ...) copied to the device, or made there from
    Python values, on the second batch (on meta; else asked for cuda, meta standing in):
    constants made per batch, each a copy; from pageable memory without non_blocking, one
    that waits for the device's queued work."""
    later, asked = [o for o in others if int(o["call"]) > 0], ""
    if not later:
        later, asked = [o for o in cuda_others if int(o["call"]) > 0], " asked for cuda"
    if not later:
        made = len(others)
        return correct(
            "constants made once",
            True,
            f"besides the batch, {made} tensor(s) crossed to the device on the first batch and "
            "none on the second"
            if made
            else "nothing besides the batch crossed to the device",
        )
    shapes = ", ".join(str(tuple(o["shape"])) for o in later[:4])
    waits = any(not (o["pinned"] and o["non_blocking"]) for o in later)
    cost = (
        "each a copy without non_blocking, after which the host waits for everything "
        "already queued on a GPU (PyTorch ends a blocking copy with a stream synchronisation: "
        "memcpy_and_sync, called from aten/src/ATen/native/cuda/Copy.cu): a sync per batch"
        if waits
        else "each batch pays a pin and a copy of the same values"
    )
    return correct(
        "constants made once",
        False,
        f"on the second batch{asked} your function copied {len(later)} tensor(s) besides the "
        f"batch to the device ({shapes}): made per batch, {cost}; make them on the device once "
        "per device (and per mean and std), then reuse them",
    )


def _as_cuda(seen: dict | None) -> tuple[int, list, list, list]:
    """The learner's function asked for device `cuda`, run on the meta stand-in (for code
    that decides from `device.type`): its per-batch pin_memory() calls, its copies from
    pinned memory, what else crossed, and a failed or not-applicable part if it raised.
    None: this machine has a GPU, and the first run of the check used it."""
    if seen is None:
        return 0, [], [], []
    if "raised" in seen:  # the learner's fault if a device fault was seen, else the stand-in's
        unseen = "pinning and non_blocking with device cuda"
        return 0, [], [], [stand_in_part("asked for cuda", seen["raised"], seen["faults"], unseen)]
    copies = [(bool(p), bool(nb)) for p, nb in seen["copies"]]
    return int(seen["pins"]), copies, [dict(o) for o in seen.get("others", [])], []
