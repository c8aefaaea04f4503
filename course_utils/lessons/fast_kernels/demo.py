"""Lesson 05's workloads for cuDNN autotuning: variable-size images, what a batching
strategy feeds the model (distinct shapes, padding), and the CUDA timings of autotuning.

cuDNN autotuning (`torch.backends.cudnn.benchmark`) and torch.compile both specialise work to
the shapes they see, so both pay once per new shape. On a CPU there is no cuDNN: the timings
here return None there, and the notebook says so instead of showing a number. channels_last
lives in `layout`, torch.compile in `compiling`.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader

from ...device import get_device, synchronize
from ...measure import time_fn
from ...models import conv_bn

# --- variable-size images and the shapes their batches take ---------------------------------

N_IMAGES, BATCH = 2048, 16  # the check's data set: 128 full batches of 16
MAX_H, MAX_W = 96, 128  # the largest image `image_sizes` can draw


def image_sizes(n: int = N_IMAGES, seed: int = 0) -> list[tuple[int, int]]:
    """(height, width) of `n` photos: log-normal heights around 36 px, three aspect ratios
    (portrait, square, landscape) with jitter: a spread like that of a photo collection."""
    gen = torch.Generator().manual_seed(seed)
    heights = torch.exp(torch.randn(n, generator=gen) * 0.35 + torch.log(torch.tensor(36.0)))
    aspect = torch.tensor([0.75, 1.0, 1.33])[torch.randint(0, 3, (n,), generator=gen)]
    aspect = aspect * (0.9 + 0.2 * torch.rand(n, generator=gen))
    h = heights.round().clamp(12, MAX_H)
    w = (h * aspect).round().clamp(12, MAX_W)
    return [(int(a), int(b)) for a, b in zip(h, w, strict=True)]


def variable_size_images(n: int = N_IMAGES, seed: int = 0) -> list[torch.Tensor]:
    """Random uint8 images (3, h, w) with the sizes of `image_sizes`: decoded photos."""
    gen = torch.Generator().manual_seed(seed + 1)
    return [
        torch.randint(0, 256, (3, h, w), dtype=torch.uint8, generator=gen)
        for h, w in image_sizes(n, seed)
    ]


def random_batches(sizes: Sequence, batch_size: int, seed: int = 0) -> list[list[int]]:
    """What a plain shuffled DataLoader does: indices in random order, cut into batches."""
    order = list(range(len(sizes)))
    random.Random(seed).shuffle(order)
    return [order[i : i + batch_size] for i in range(0, len(order), batch_size)]


def sorted_batches(sizes: Sequence, batch_size: int, seed: int = 0) -> list[list[int]]:
    """Indices sorted by (height, width), cut into batches, the batches shuffled."""
    order = sorted(range(len(sizes)), key=lambda i: tuple(sizes[i]))
    batches = [order[i : i + batch_size] for i in range(0, len(order), batch_size)]
    random.Random(seed).shuffle(batches)
    return batches


def pad_to_global_max(images: list[torch.Tensor]) -> torch.Tensor:
    """Pad every image to the largest size in the data set: one shape for every batch."""
    return torch.stack(
        [F.pad(im, (0, MAX_W - im.shape[2], 0, MAX_H - im.shape[1])) for im in images]
    )


def pad_to_batch_max(images: list[torch.Tensor]) -> torch.Tensor:
    """The usual variable-size collate: pad every image (bottom, right) to the batch's largest."""
    h = max(im.shape[1] for im in images)
    w = max(im.shape[2] for im in images)
    return torch.stack([F.pad(im, (0, w - im.shape[2], 0, h - im.shape[1])) for im in images])


@dataclass
class LoaderStats:
    """What a batching strategy feeds the model: how many distinct batch shapes (each one a
    new cuDNN autotuning run, or a torch.compile recompile) and how much of it is padding."""

    batches: int
    distinct_shapes: int
    real_pixels: int
    padded_pixels: int
    largest_batch: int
    problems: list[str] = field(default_factory=list)  # samples lost, repeated or changed
    shape_counts: Counter = field(default_factory=Counter)

    @property
    def padding_overhead(self) -> float:
        """Extra pixels computed on, as a fraction of the real ones (0.5 = 50% wasted work)."""
        return self.padded_pixels / self.real_pixels - 1

    def to_dict(self) -> dict:
        return {
            "batches": self.batches,
            "distinct_shapes": self.distinct_shapes,
            "padding_overhead": self.padding_overhead,
            "largest_batch": self.largest_batch,
            "problems": self.problems,
        }


def _slot_problem(i: int, image: torch.Tensor, slot: tuple[int, ...], crop) -> str:
    """Why sample `i` did not arrive intact at the top-left of its slot (of shape `slot`;
    `crop`: the slot's top-left corner of the image's size), or ''."""
    c, h, w = image.shape
    if len(slot) != 3 or slot[0] != c:
        return f"sample {i} arrived with shape {tuple(slot)}, not (3, H, W)"
    if slot[1] < h or slot[2] < w:
        return (
            f"sample {i} ({h}x{w}) was truncated to {slot[1]}x{slot[2]}: "
            "pad up to the bucket size, never crop down"
        )
    crop = torch.as_tensor(crop)
    if crop.shape != image.shape or not torch.equal(crop.to(image.dtype), image):
        return (
            f"sample {i}'s pixels changed: keep each image as it is at the top-left and pad "
            "the bottom and right (F.pad(x, (0, W - w, 0, H - h))), no resizing"
        )
    return ""


def batch_outputs(
    batches: Iterable[list[int]],
    collate: Callable[[list[torch.Tensor]], torch.Tensor],
    images: Sequence[torch.Tensor],
    *,
    crops: bool = True,
) -> list[dict]:
    """Run a DataLoader with this batch sampler and collate; per batch, what came out: its
    type and shape, and (`crops`) each sample's slot cut to the sample's own size (all that
    `stats_from` needs to verify it, and as many bytes as the images themselves)."""
    batches = [list(b) for b in batches]
    loader = DataLoader(images, batch_sampler=batches, collate_fn=collate)
    out = []
    for idx, batch in zip(batches, loader, strict=True):
        if not isinstance(batch, torch.Tensor):
            out.append({"type": type(batch).__name__, "shape": None})
            continue
        seen = {"type": "Tensor", "shape": list(batch.shape)}
        if crops and batch.dim() == 4 and len(batch) == len(idx):
            seen["crops"] = [
                s[:, : images[i].shape[1], : images[i].shape[2]].clone()
                for i, s in zip(idx, batch, strict=True)
            ]
        out.append(seen)
    return out


def stats_from(
    batches: Iterable[list[int]],
    outputs: list[dict],
    images: Sequence[torch.Tensor],
    *,
    verify: bool = True,
) -> LoaderStats:
    """What the batches fed the model, from `batch_outputs`' record of them: distinct shapes,
    pixels padded, and samples lost, repeated or changed."""
    batches = [[int(i) for i in b] for b in batches]
    if len(outputs) != len(batches):
        raise ValueError(f"{len(outputs)} batches came out of {len(batches)}")
    shapes: Counter = Counter()
    real = padded = 0
    problems: list[str] = []
    for idx, out in zip(batches, outputs, strict=True):
        shape = tuple(int(d) for d in out["shape"]) if out.get("shape") is not None else None
        if shape is None or len(shape) != 4 or shape[0] != len(idx):
            got = shape if shape is not None else out.get("type")
            problems.append(f"a batch of {len(idx)} samples came out as {got}, not (B, 3, H, W)")
            continue
        shapes[shape] += 1
        padded += shape[0] * shape[2] * shape[3]
        real += sum(images[i].shape[1] * images[i].shape[2] for i in idx)
        if verify and len(problems) < 3:
            crops = out.get("crops") or [None] * len(idx)
            problems += [
                p
                for p in (
                    _slot_problem(i, images[i], shape[1:], crop)
                    for i, crop in zip(idx, crops, strict=True)
                )
                if p
            ][:1]
    seen = Counter(i for b in batches for i in b)
    lost = [i for i in range(len(images)) if seen[i] == 0]
    twice = [i for i, n in seen.items() if n > 1]
    if lost:
        problems.insert(
            0, f"{len(lost)} of {len(images)} samples never reach the model (first: {lost[:3]})"
        )
    if twice:
        problems.insert(0, f"{len(twice)} samples are fed more than once (first: {twice[:3]})")
    return LoaderStats(
        len(batches),
        len(shapes),
        max(real, 1),
        padded,
        max((len(b) for b in batches), default=0),
        problems,
        shapes,
    )


def loader_stats(
    batches: Iterable[list[int]],
    collate: Callable[[list[torch.Tensor]], torch.Tensor],
    images: Sequence[torch.Tensor],
    *,
    verify: bool = True,
) -> LoaderStats:
    """Run a DataLoader with this batch sampler and collate, and measure what comes out."""
    batches = [list(b) for b in batches]
    outputs = batch_outputs(batches, collate, images, crops=verify)
    return stats_from(batches, outputs, images, verify=verify)


def strategy_table(
    strategies: dict[str, tuple[Callable, Callable]], images
) -> dict[str, LoaderStats]:
    """LoaderStats for several (batch sampler, collate) pairs over the same images."""
    sizes = [tuple(im.shape[1:]) for im in images]
    return {
        name: loader_stats(sampler(sizes, BATCH), collate, images, verify=False)
        for name, (sampler, collate) in strategies.items()
    }


def plot_strategies(table: dict[str, LoaderStats], max_shapes: float, max_overhead: float):
    """Distinct shapes against padding overhead: the corner inside both bounds is the goal."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3.8))
    for i, (name, s) in enumerate(table.items()):
        ax.scatter(s.distinct_shapes, 100 * s.padding_overhead, s=60, color=f"C{i}", label=name)
    ax.axvline(max_shapes, color="grey", linestyle="--")
    ax.axhline(100 * max_overhead, color="grey", linestyle="--")
    ax.fill_between([0, max_shapes], 0, 100 * max_overhead, color="C2", alpha=0.08)
    ax.set(
        xlabel="distinct batch shapes (autotuning runs / recompiles)", ylabel="padding overhead (%)"
    )
    ax.set_xscale("symlog", linthresh=10)
    ax.set_yscale("symlog", linthresh=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


# --- cuDNN autotuning: what a new shape costs, with and without benchmark mode --------------


def conv_net(width: int, device: torch.device) -> nn.Module:
    return nn.Sequential(conv_bn(3, width), conv_bn(width, width), conv_bn(width, width)).to(device)


def first_epoch_s(
    batches,
    collate,
    images,
    *,
    width: int,
    benchmark: bool = True,
    device: torch.device | None = None,
) -> float:
    """Seconds for one pass (forward + backward) over the batches on CUDA, with a fresh
    network whose `width` no earlier run used, so every shape meets an empty autotuning
    cache, as it does in a new training process."""
    device = device or get_device()
    net = conv_net(width, device)
    loader = DataLoader(images, batch_sampler=[list(b) for b in batches], collate_fn=collate)
    with torch.backends.cudnn.flags(enabled=True, benchmark=benchmark):
        net(torch.rand(1, 3, 8, 8, device=device)).mean().backward()  # start-up, apart
        synchronize(device)
        start = time.perf_counter()
        for x in loader:
            net(x.to(device, non_blocking=True).float()).mean().backward()
        synchronize(device)
        return time.perf_counter() - start


@dataclass
class AutotuneCost:
    """Seconds per training step of a conv net on CUDA: the first call at a shape it has not
    seen (tuning included), the steady state at that shape, and at a shape all modes share."""

    mode: str
    first_call_s: float
    steady_s: float
    common_s: float

    @property
    def tuning_s(self) -> float:
        return self.first_call_s - self.steady_s


def autotune_costs(width: int = 64, batch: int = 32, size: int = 64) -> list[AutotuneCost] | None:
    """cuDNN defaults, benchmark mode and deterministic mode; None off CUDA (no cuDNN)."""
    device = get_device()
    return measure_modes(device, width, batch, size) if device.type == "cuda" else None


def measure_modes(device: torch.device, width: int, batch: int, size: int) -> list[AutotuneCost]:
    """The cuDNN flag modes on `device` (elsewhere than CUDA the flags change nothing).

    Each mode meets its own new shape for the first call (a cached shape would hide the
    tuning), timed again once it is cached, and all modes are compared in steady state at
    one common shape, after warm-up.
    """
    net = conv_net(width, device)
    net(torch.randn(2, 3, 8, 8, device=device)).mean().backward()  # CUDA/cuDNN start-up, apart
    modes = {
        "default": {},
        "benchmark": {"benchmark": True},
        "deterministic": {"deterministic": True},
    }
    common = torch.randn(batch, 3, size, size, device=device)
    out = []
    for k, (mode, flags) in enumerate(modes.items(), start=1):
        new = torch.randn(batch, 3, size + 8 * k, size + 8 * k, device=device)
        with torch.backends.cudnn.flags(enabled=True, **flags):
            synchronize(device)
            start = time.perf_counter()
            net(new).mean().backward()
            synchronize(device)
            first = time.perf_counter() - start
            steady = time_fn(
                lambda x=new: net(x).mean().backward(), warmup=1, repeats=10, device=device
            )
            shared = time_fn(
                lambda: net(common).mean().backward(), warmup=3, repeats=10, device=device
            )
        out.append(AutotuneCost(mode, first, steady.median, shared.median))
    return out
