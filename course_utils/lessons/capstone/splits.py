"""The capstone's data: the training split a speed-run is handed, and the held-out split that
only the check reads (guarded: learner code that touches it fails, naming it).

The check hands each timed call the training split with its classes renamed (`Relabelled`)
and judges the model against the test split renamed the same way. A model trained from
scratch on what it was given learns the new names as easily as the old ones (the classes are
only relabelled); one that learned from anything else (weights kept from an earlier training,
images and labels decoded before the call, the notebook's own `train_set`) predicts the old
names, and the check tells it apart by scoring both."""

from __future__ import annotations

import functools

import torch
from torch import nn
from torch.utils.data import Dataset, Subset

from ...checks import held_out
from ...data import dataset_source, load_data, to_tensors
from ...device import get_device
from ...mode import pick

NUM_CLASSES = 10  # CIFAR-10 and the offline set
RAW_ARRAYS = ("data", "blobs")  # CIFAR10's uint8 images, the offline set's JPEG bytes


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
def held_out_set() -> tuple[torch.Tensor, torch.Tensor]:
    """The test split as the check judges on it: normalised float NCHW images, their labels."""
    return _held_out(dataset_source(), pick(quick=1_000, full=None))


@held_out
def held_out_predictions(
    model: nn.Module, device: torch.device | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The model's top-1 class for each test image (normalised float NCHW, eval mode), and
    the true labels."""
    device = device or get_device()
    x, y = held_out_set.__wrapped__()
    was_training = model.training
    model.eval()
    with torch.no_grad():
        predicted = torch.cat(
            [model(x[i : i + 500].to(device)).argmax(1).cpu() for i in range(0, len(x), 500)]
        )
    model.train(was_training)
    return predicted, y


@held_out
def held_out_accuracy(
    model: nn.Module, device: torch.device | None = None, shift: int = 0
) -> float:
    """Top-1 accuracy on the test split; `shift`: with its classes renamed as `Relabelled`
    renames the training split's."""
    predicted, y = held_out_predictions.__wrapped__(model, device)
    return float((predicted == (y + shift) % NUM_CLASSES).float().mean())


class Relabelled(Dataset):
    """The training split with every class renamed, label k read as (k + shift) mod 10: what
    one timed call of a speed-run is given. Items, `targets` and `classes` follow the new
    names; anything else (`data`, the raw images) is the source's, and reading a raw array
    is counted in `raw_reads` (images read without `__getitem__`)."""

    def __init__(self, source: Dataset, shift: int):
        self._source, self.shift, self.raw_reads = source, shift, 0

    def __len__(self) -> int:
        return len(self._source)

    def __getitem__(self, i: int):
        image, label = self._source[i]
        return image, (int(label) + self.shift) % NUM_CLASSES

    @property
    def targets(self) -> list[int]:
        return [(int(t) + self.shift) % NUM_CLASSES for t in self._source.targets]

    @property
    def classes(self) -> list:
        names = list(self._source.classes)
        return [names[(k - self.shift) % NUM_CLASSES] for k in range(NUM_CLASSES)]

    def __getattr__(self, name: str):
        if name.startswith("_"):  # unpickling (DataLoader workers) asks before _source is set
            raise AttributeError(name)
        if name in RAW_ARRAYS:
            self.raw_reads += 1
        return getattr(self._source, name)


def small_subset(dataset: Dataset, batches: int, batch_size: int) -> Dataset:
    """The first `batches` x `batch_size` items: a warm-up that runs every kernel once."""
    return Subset(dataset, range(min(len(dataset), batches * batch_size)))
