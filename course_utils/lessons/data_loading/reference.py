"""Lesson 03's reference answers. Demos and checks may call them; a learner's function may
not while it is graded (`@reference`). Each says where it was verified."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable, Sequence

import torch
from torch.utils.data import DataLoader, Dataset

from ...checks import reference
from .demo import EpochProfile, usable_cpus


@reference
def reference_profile(
    loader: Iterable, step: Callable, synchronize: Callable[[], None] = lambda: None
) -> EpochProfile:
    """One epoch split into waiting for batches and computing, the device synchronised after
    each step. Verified by check 03-profile against the simulated device's measured busy time
    and the dataset's measured loading time (cpu-bf16, 2 cores)."""
    data_s = compute_s = 0.0
    batches = 0
    synchronize()
    t0 = time.perf_counter()
    for x, y in loader:
        t1 = time.perf_counter()
        step(x, y)
        synchronize()  # queued device work belongs to this step, not to the next wait
        t2 = time.perf_counter()
        data_s, compute_s, batches = data_s + t1 - t0, compute_s + t2 - t1, batches + 1
        t0 = t2
    return EpochProfile(data_s + time.perf_counter() - t0, compute_s, batches)


@reference
def reference_fast_loader(
    dataset: Dataset, batch_size: int, device: torch.device, num_workers: int | None = None
) -> DataLoader:
    """The broken loader fixed: importable collate (the default), pinning by the loader's own
    thread and only for a GPU, workers kept alive, as many as the sweep says. Verified by
    check 03-fast-loader (cpu-bf16, 2 cores; its speed part not-applicable under load)."""
    return DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=True,
        num_workers=num_workers if num_workers is not None else min(2, usable_cpus()),
        persistent_workers=True,
        pin_memory=torch.device(device).type == "cuda",
    )


@reference
def reference_to_device(
    batch: tuple[torch.Tensor, torch.Tensor], device: torch.device, mean, std
) -> tuple[torch.Tensor, torch.Tensor]:
    """Copy the uint8 batch (a quarter of float32's bytes), asynchronously where the source is
    pinned, then normalise there with mean and std kept on the device (made once per device,
    not per batch: a host-to-device copy of them would wait for the images' non_blocking
    copy just queued, and lose the overlap). Verified by check 03-transfer on CPU, with
    pinning simulated and the meta device standing in for a GPU; not yet run on CUDA."""
    images, labels = batch
    images = images.to(device, non_blocking=True)
    labels = labels.to(device, non_blocking=True)
    mean, std = _per_channel(mean, images.device), _per_channel(std, images.device)
    return (images.float() / 255 - mean) / std, labels


def _per_channel(values: Sequence[float], device: torch.device) -> torch.Tensor:
    """`values` as a (1, C, 1, 1) float32 tensor on `device`, built on the first call only."""
    return _on_device(tuple(float(v) for v in values), torch.device(device))


@functools.lru_cache(maxsize=16)
def _on_device(values: tuple[float, ...], device: torch.device) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32, device=device).view(1, -1, 1, 1)


@reference
def reference_make_normaliser(train_loader: Iterable, test_loader: Iterable) -> Callable:
    """Per-channel mean and std of the training split, pooled over every pixel of every batch
    (so an uneven last batch weighs what its pixels weigh), in the 0-1 scale of x / 255; the
    test split is never read: its statistics are what the model is judged on, not fitted to.
    Verified by check 03-normalise (cpu-bf16, and the meta device standing in for a GPU)."""
    total = squares = None
    count = 0
    for images, _ in train_loader:
        x = images.double() / 255
        s, q = x.sum((0, 2, 3)), (x * x).sum((0, 2, 3))
        total, squares = (s, q) if total is None else (total + s, squares + q)
        count += x.numel() // x.shape[1]
    mean = total / count
    std = (squares / count - mean**2).clamp_min(0).sqrt()
    return _Normaliser(mean.tolist(), std.tolist())


class _Normaliser:
    """uint8 (N, C, H, W) -> float32 (x / 255 - mean) / std, as one multiply-add on the
    images' device: x * 1/(255 std) - mean/std, with both kept there after the first call."""

    def __init__(self, mean: Sequence[float], std: Sequence[float]):
        self.mean, self.std = tuple(mean), tuple(std)
        self.scale = tuple(1 / (255 * s) for s in self.std)
        self.shift = tuple(-m / s for m, s in zip(self.mean, self.std, strict=True))

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        scale, shift = (
            _per_channel(self.scale, images.device),
            _per_channel(self.shift, images.device),
        )
        return torch.addcmul(shift, images.float(), scale)
