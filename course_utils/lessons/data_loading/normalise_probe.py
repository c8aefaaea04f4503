"""Check 03-normalise's specimen and its probe: uint8 training and test splits that break the
plausible mistakes (channels far apart, batches whose means differ, an uneven last batch much
brighter, a test split with other statistics), built from a seed on both sides; the probe
fits the learner's normaliser on them in the learner's kernel and returns what it made of
each split, and what happened to a batch on the meta device (a stand-in for a GPU)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
from torch.utils.data import DataLoader, TensorDataset

from ...probes import probe
from .probes import DeviceFaults, faults_info, raised_info

MEANS, STDS = (0.8, 0.2, 0.5), (0.05, 0.3, 0.1)  # per channel, 0-1 scale: far apart
TEST_MEANS, TEST_STDS = (0.6, 0.4, 0.3), (0.1, 0.2, 0.2)
SPEC_BATCH, FULL_BATCHES, LAST = 32, 9, 5  # nine full batches and one of 5 images
HEIGHT, WIDTH = 5, 7  # neither equals the 3 channels: a stat over the wrong axis cannot fit


def _to_uint8(x: torch.Tensor) -> torch.Tensor:
    return (x * 255).round().clamp(0, 255).to(torch.uint8)


def _images(n: int, means, stds, g: torch.Generator) -> torch.Tensor:
    m = torch.tensor(means).view(1, 3, 1, 1)
    s = torch.tensor(stds).view(1, 3, 1, 1)
    return m + s * torch.randn(n, 3, HEIGHT, WIDTH, generator=g)


def specimen(seed: int = 17) -> tuple[torch.Tensor, torch.Tensor]:
    """uint8 training and test images: per-batch offsets so batch means differ, and a last
    batch of 5 bright, flat images (weighed by its pixels it hardly moves the mean)."""
    g = torch.Generator().manual_seed(seed)
    full = _images(SPEC_BATCH * FULL_BATCHES, MEANS, STDS, g)
    offsets = torch.linspace(-0.12, 0.12, FULL_BATCHES).repeat_interleave(SPEC_BATCH)
    last = 0.97 + 0.01 * torch.randn(LAST, 3, HEIGHT, WIDTH, generator=g)
    train = torch.cat([full + offsets.view(-1, 1, 1, 1), last])
    test = _images(2 * SPEC_BATCH + 7, TEST_MEANS, TEST_STDS, g)
    return _to_uint8(train), _to_uint8(test)


class Counted:
    """A loader that counts how often it was iterated, or its dataset read."""

    def __init__(self, loader: DataLoader):
        self.loader, self.reads = loader, 0

    def __iter__(self) -> Iterator:
        self.reads += 1
        return iter(self.loader)

    def __len__(self) -> int:
        return len(self.loader)

    def __getattr__(self, name: str):
        if name == "dataset":
            self.reads += 1
        return getattr(self.loader, name)


def loader_of(images: torch.Tensor) -> Counted:
    """The split as the learner's function gets it: uint8 (images, labels) batches of 32."""
    labels = torch.arange(len(images)) % 10
    return Counted(DataLoader(TensorDataset(images, labels), batch_size=SPEC_BATCH))


def apply(normalise: Callable, images: torch.Tensor) -> torch.Tensor:
    """`normalise` on the split, batch by batch, as float64."""
    return torch.cat([torch.as_tensor(normalise(b)).double() for b in images.split(SPEC_BATCH)])


def _raises_mixed(normalise: Callable, x: torch.Tensor) -> bool | None:
    """True: raised with tensors on two devices; False: ran; None: raised otherwise."""
    faults = DeviceFaults()
    try:
        with faults:
            normalise(x)
    except Exception:
        return True if faults.mixed else None
    return False


def _where_statistics(refit: Callable[[], Callable], images: torch.Tensor) -> dict | None:
    """A fresh normaliser on a meta batch first, then on a CPU batch: whether each raised
    with tensors on two devices (None when refitting raised)."""
    try:
        fresh = refit()
        first = _raises_mixed(fresh, images[:SPEC_BATCH].to("meta"))
        second = _raises_mixed(fresh, images[:SPEC_BATCH]) if first is False else None
    except Exception:
        return None
    return {"first": first, "second": second}


def _on_meta(normalise: Callable, images: torch.Tensor, refit: Callable[[], Callable]) -> dict:
    """A uint8 batch on meta through `normalise`: what came back (described: a meta tensor
    holds no values), or what it raised and the device faults seen."""
    x = images[:SPEC_BATCH].to("meta")
    faults = DeviceFaults()
    try:
        with faults:
            y = normalise(x)
    except Exception as exc:
        seen = {"raised": raised_info(exc), "faults": faults_info(faults)}
        if faults.mixed and not faults.host_reads:  # where does it keep its statistics?
            seen["refit"] = _where_statistics(refit, images)
        return seen
    if not isinstance(y, torch.Tensor):
        return {"out": {"type": type(y).__name__}}
    return {
        "out": {
            "type": "Tensor",
            "device": y.device.type,
            "dtype": str(y.dtype).removeprefix("torch."),
            "shape": list(y.shape),
        }
    }


@probe
def normaliser_reading(make_normaliser, seed: int) -> dict:
    """The learner's make_normaliser fitted on specimen(seed): the training and test splits it
    normalised, how often it read the test split, and a batch on the meta device."""
    train, test = specimen(seed)
    test_loader = loader_of(test)
    normalise = make_normaliser(loader_of(train), test_loader)
    seen = {"train": apply(normalise, train), "test": apply(normalise, test)}
    seen["test_reads"] = test_loader.reads

    def refit() -> Callable:
        return make_normaliser(*map(loader_of, specimen(seed)))

    seen["meta"] = _on_meta(normalise, test, refit)
    return seen
