"""Data: CIFAR-10 when it is there, else a deterministic offline image set that costs what
real images cost to load (each item is an encoded JPEG, decoded and augmented per access).

Everything here is importable and picklable, so DataLoader workers work under the spawn and
forkserver start methods (macOS, Windows, Python >= 3.14), not only fork.
"""

from __future__ import annotations

import io
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset

from .compat import require_torchvision

T = require_torchvision().transforms  # a torchvision built for another torch says what to install

CIFAR_MEAN, CIFAR_STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)
SHAPES = ("disk", "square", "triangle", "cross", "ring")
PALETTES = ("warm", "cool")
OFFLINE_CLASSES = tuple(f"{p}-{s}" for p in PALETTES for s in SHAPES)


def _hsv_to_rgb(h: float, s: float, v: float) -> np.ndarray:
    i, f = int(h * 6) % 6, h * 6 - int(h * 6)
    p, q, t = v * (1 - s), v * (1 - f * s), v * (1 - (1 - f) * s)
    return np.array([(v, t, p), (q, v, p), (p, v, t), (p, q, v), (t, p, v), (v, p, q)][i])


def _shape_mask(
    shape: str, xx: np.ndarray, yy: np.ndarray, cx: float, cy: float, r: float
) -> np.ndarray:
    dx, dy = np.abs(xx - cx), np.abs(yy - cy)
    dist = np.hypot(xx - cx, yy - cy)
    if shape == "disk":
        return dist < r
    if shape == "square":
        return np.maximum(dx, dy) < r * 0.85
    if shape == "triangle":
        return (yy - cy > -r) & (yy - cy < r) & (dx < (yy - cy + r) * 0.55)
    if shape == "cross":
        return ((dx < r / 3) & (dy < r)) | ((dy < r / 3) & (dx < r))
    return (dist < r) & (dist > r * 0.55)  # ring


def render_image(label: int, rng: np.random.Generator, size: int = 32) -> np.ndarray:
    """One HxWx3 uint8 image of class `label`: a shape (5 kinds) in a palette (2 kinds),
    at a random place, size and hue, on a noisy background with a distractor blob."""
    shape, palette = SHAPES[label % 5], PALETTES[label // 5]
    yy, xx = np.mgrid[0:size, 0:size].astype(np.float32) / size
    base = rng.uniform(0.2, 0.8)
    bg = base + 0.15 * (xx * rng.uniform(-1, 1) + yy * rng.uniform(-1, 1))
    img = np.repeat(bg[..., None], 3, axis=2) * rng.uniform(0.8, 1.2, size=3)
    blob = _shape_mask("disk", xx, yy, *rng.uniform(0.1, 0.9, 2), rng.uniform(0.05, 0.12))
    img[blob] = rng.uniform(0, 1, 3) * 0.6 + 0.2
    hue = rng.uniform(-0.05, 0.12) % 1 if palette == "warm" else rng.uniform(0.45, 0.68)
    colour = _hsv_to_rgb(hue, rng.uniform(0.6, 1.0), rng.uniform(0.6, 1.0))
    r = rng.uniform(0.18, 0.32)
    mask = _shape_mask(shape, xx, yy, *rng.uniform(r, 1 - r, 2), r)
    img[mask] = colour
    img += rng.normal(0, 0.06, img.shape)
    return (np.clip(img, 0, 1) * 255).astype(np.uint8)


_CACHE: dict[tuple, tuple[list[bytes], list[int]]] = {}


def _encoded_images(
    n: int, train: bool, seed: int, size: int, quality: int
) -> tuple[list[bytes], list[int]]:
    key = (n, train, seed, size, quality)
    if key not in _CACHE:
        rng = np.random.default_rng([seed, int(train)])
        labels = rng.integers(0, len(OFFLINE_CLASSES), n).tolist()
        blobs = []
        for label in labels:
            buf = io.BytesIO()
            Image.fromarray(render_image(label, rng, size)).save(
                buf, format="JPEG", quality=quality
            )
            blobs.append(buf.getvalue())
        _CACHE[key] = (blobs, labels)
    return _CACHE[key]


class OfflineImages(Dataset):
    """A deterministic, learnable 10-class image set that needs no download.

    Items are JPEG bytes decoded on every access, like files on disk: loading costs CPU time,
    which is what the data-loading lesson needs. `stored_size` > 32 makes decoding dearer
    (the images are resized to `size` after decoding, as real pipelines do).
    """

    name = "offline"
    classes = OFFLINE_CLASSES

    def __init__(
        self,
        n: int = 10_000,
        *,
        train: bool = True,
        seed: int = 0,
        stored_size: int = 32,
        quality: int = 90,
        transform=None,
    ):
        self.n, self.train, self.seed, self.stored_size, self.quality = (
            n,
            train,
            seed,
            stored_size,
            quality,
        )
        self.blobs, self.targets = _encoded_images(n, train, seed, stored_size, quality)
        self.transform = transform

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        img = Image.open(io.BytesIO(self.blobs[i])).convert("RGB")
        return (self.transform(img) if self.transform else img), self.targets[i]


def train_transform(size: int = 32, stored_size: int = 32) -> T.Compose:
    """Standard CIFAR augmentation: pad-and-crop, horizontal flip, normalise."""
    resize = [T.Resize(size)] if stored_size != size else []
    return T.Compose(
        [
            *resize,
            T.RandomCrop(size, padding=4),
            T.RandomHorizontalFlip(),
            T.ToTensor(),
            T.Normalize(CIFAR_MEAN, CIFAR_STD),
        ]
    )


def test_transform(size: int = 32, stored_size: int = 32) -> T.Compose:
    resize = [T.Resize(size)] if stored_size != size else []
    return T.Compose([*resize, T.ToTensor(), T.Normalize(CIFAR_MEAN, CIFAR_STD)])


def data_dir() -> Path:
    return Path(os.environ.get("COURSE_DATA", Path.home() / ".cache" / "course_data"))


def cifar10_on_disk(root: Path | None = None) -> bool:
    return ((root or data_dir()) / "cifar-10-batches-py" / "data_batch_1").exists()


def dataset_source() -> str:
    """'cifar10' or 'offline'. $COURSE_DATASET forces one; by default CIFAR-10 is used when it
    is on disk, or on Colab (where it downloads); everywhere else the offline set."""
    choice = os.environ.get("COURSE_DATASET", "auto").lower()
    if choice in {"offline", "cifar10"}:
        return choice
    return "cifar10" if cifar10_on_disk() or "google.colab" in sys.modules else "offline"


@dataclass
class Splits:
    train: Dataset
    test: Dataset
    source: str
    classes: tuple

    def describe(self) -> str:
        what = (
            "CIFAR-10"
            if self.source == "cifar10"
            else "the offline image set (synthetic shapes, JPEG-encoded)"
        )
        return f"Data: {what}; {len(self.train):,} training and {len(self.test):,} test images."


def _cifar10(tr, te, n_train: int | None, n_test: int | None) -> Splits:
    from torchvision.datasets import CIFAR10

    root = data_dir()
    train = CIFAR10(root, train=True, download=True, transform=tr)
    test = CIFAR10(root, train=False, download=True, transform=te)
    if n_train:
        train = torch.utils.data.Subset(train, range(min(n_train, len(train))))
    if n_test:
        test = torch.utils.data.Subset(test, range(min(n_test, len(test))))
    return Splits(train, test, "cifar10", tuple(getattr(CIFAR10, "classes", range(10))))


def load_data(
    n_train: int | None = None,
    n_test: int | None = None,
    *,
    augment: bool = True,
    stored_size: int = 32,
    raw: bool = False,
) -> Splits:
    """Training and test sets from `dataset_source()`; `n_*` take a prefix (quick mode).
    `raw`: items are (PIL image, label), for code that does its own decoding and transforms."""
    source = dataset_source()
    tr = train_transform(32, stored_size) if augment else test_transform(32, stored_size)
    te = test_transform(32, stored_size)
    if raw:
        tr = te = None
    if source == "cifar10":
        try:
            return _cifar10(tr, te, n_train, n_test)
        except (OSError, RuntimeError) as exc:  # no network, a half-downloaded archive
            reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            print(
                f"CIFAR-10 could not be loaded ({reason}); using the offline image set instead. "
                f"Put CIFAR-10 under {data_dir()} (or set $COURSE_DATA) to use it.",
                file=sys.stderr,
            )
            source = "offline"
    train = OfflineImages(n_train or 20_000, train=True, stored_size=stored_size, transform=tr)
    test = OfflineImages(n_test or 2_000, train=False, stored_size=stored_size, transform=te)
    return Splits(train, test, source, OFFLINE_CLASSES)


def to_tensors(dataset: Dataset, limit: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Decode a dataset once into (images, labels) tensors, for lessons where loading is not
    the point and the data should sit in memory (or on the GPU)."""
    n = min(len(dataset), limit or len(dataset))
    xs, ys = zip(*(dataset[i] for i in range(n)), strict=True)
    return torch.stack(xs), torch.tensor(ys)


def close_loader(loader) -> None:
    """Stop a DataLoader's persistent workers now instead of whenever it is garbage-collected
    (a notebook keeps loaders alive, and each idle worker holds a process and its memory)."""
    it = getattr(loader, "_iterator", None)
    if it is not None and hasattr(it, "_shutdown_workers"):
        it._shutdown_workers()
    if hasattr(loader, "_iterator"):
        loader._iterator = None
