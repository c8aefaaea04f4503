"""The capstone's data: the training split a speed-run is handed, and the held-out split that
only the check reads (guarded: learner code that touches it fails, naming it)."""

from __future__ import annotations

import functools

import torch
from torch import nn
from torch.utils.data import Dataset, Subset

from ...checks import held_out
from ...data import dataset_source, load_data, to_tensors
from ...device import get_device
from ...mode import pick


def N_TRAIN() -> int | None:  # noqa: N802 - a size that follows the mode
    return pick(quick=2_500, full=None)


def training_set() -> Dataset:
    """What a speed-run gets: the training split only, decoded per item (PIL image, label)."""
    return load_data(N_TRAIN(), 1, raw=True).train


@held_out
@functools.cache
def _held_out(source: str, n_test: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    return to_tensors(load_data(1, n_test).test)


@held_out
def held_out_accuracy(model: nn.Module, device: torch.device | None = None) -> float:
    """Top-1 accuracy on the test split (normalised float NCHW images), in eval mode."""
    device = device or get_device()
    x, y = _held_out(dataset_source(), pick(quick=1_000, full=None))
    was_training = model.training
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, len(x), 500):
            out = model(x[i : i + 500].to(device))
            correct += int((out.argmax(1).cpu() == y[i : i + 500]).sum())
    model.train(was_training)
    return correct / len(x)


def small_subset(dataset: Dataset, batches: int, batch_size: int) -> Dataset:
    """The first `batches` x `batch_size` items: a warm-up that runs every kernel once."""
    return Subset(dataset, range(min(len(dataset), batches * batch_size)))
