"""The capstone's two data paths: the newcomer's (a DataLoader that decodes and augments each
image in the training process, every epoch) and the tuned one (decode once into a uint8
tensor on the device, augment and normalise whole batches there)."""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from ...data import CIFAR_MEAN, CIFAR_STD, train_transform
from ...device import synchronize


def decode_all(dataset: Dataset, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """Every image decoded once into one uint8 tensor on the device (N, 3, 32, 32)."""
    import numpy as np

    images, labels = zip(*(dataset[i] for i in range(len(dataset))), strict=True)
    x = torch.from_numpy(np.stack([np.asarray(im, dtype=np.uint8) for im in images]))
    return x.permute(0, 3, 1, 2).contiguous().to(device), torch.tensor(labels, device=device)


def device_batches(x: torch.Tensor, y: torch.Tensor, batch_size: int, generator: torch.Generator):
    """Shuffled batches of uint8 images, augmented (random 4-pixel translation, horizontal
    flip) and normalised on the device: the per-image CPU work of a DataLoader, batched."""
    mean = torch.tensor(CIFAR_MEAN, device=x.device).view(1, 3, 1, 1) * 255
    std = torch.tensor(CIFAR_STD, device=x.device).view(1, 3, 1, 1) * 255
    padded = nn.functional.pad(x, (4, 4, 4, 4))  # zeros, as torchvision RandomCrop(padding=4)
    size = x.shape[-1]
    grid = torch.arange(size, device=x.device)
    order = torch.randperm(len(x), generator=generator).to(x.device)
    for i in range(0, len(x) - batch_size + 1, batch_size):
        idx = order[i : i + batch_size]
        dy, dx = torch.randint(0, 9, (2, len(idx), 1, 1), generator=generator).to(x.device)
        rows = (grid.view(1, size, 1) + dy).unsqueeze(1)  # (B, 1, size, 1)
        cols = (grid.view(1, 1, size) + dx).unsqueeze(1)  # (B, 1, 1, size)
        chans = torch.arange(3, device=x.device).view(1, 3, 1, 1)
        xb = padded[idx.view(-1, 1, 1, 1), chans, rows, cols].float()
        flip = torch.rand(len(idx), 1, 1, 1, generator=generator).to(x.device) < 0.5
        xb = torch.where(flip, xb.flip(3), xb)
        yield (xb - mean) / std, y[idx]


class _Transformed(Dataset):
    def __init__(self, dataset: Dataset, transform):
        self.dataset, self.transform = dataset, transform

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i: int):
        image, label = self.dataset[i]
        return self.transform(image), label


def newcomer_loader(dataset: Dataset, batch_size: int, generator=None) -> DataLoader:
    """Lesson 03's starting point: decode and augment each image in the training process
    (num_workers=0), every epoch."""
    transformed = _Transformed(dataset, train_transform())
    return DataLoader(
        transformed, batch_size=batch_size, shuffle=True, drop_last=True, generator=generator
    )


@dataclass(frozen=True)
class Decoded:
    """The training set decoded on the device once, and what that took on both clocks."""

    x: torch.Tensor
    y: torch.Tensor
    wall_s: float
    cpu_s: float


def decode_timed(dataset: Dataset, device: torch.device) -> Decoded:
    synchronize(device)
    t0, cpu0 = time.perf_counter(), time.process_time()
    x, y = decode_all(dataset, device)
    synchronize(device)
    return Decoded(x, y, time.perf_counter() - t0, time.process_time() - cpu0)
