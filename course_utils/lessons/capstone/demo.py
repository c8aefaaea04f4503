"""Lesson 11, the capstone: a speed-run to a target accuracy on held-out data.

A `Recipe` names one choice per lesson; `train_recipe` trains with it and `held_out_accuracy`
judges the model on the test split, which no training code sees. The baseline recipe is the
plain loop a newcomer writes; the tuned recipe combines what the course taught, and
`ablation` removes one technique at a time to show what each is worth on this machine.
"""

from __future__ import annotations

import dataclasses
import functools
import statistics
import time
from dataclasses import dataclass

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset
from tqdm.auto import tqdm

from ...checks import reference
from ...data import CIFAR_MEAN, CIFAR_STD, load_data, to_tensors, train_transform
from ...device import amp_dtype, autocast, device_class, get_device, synchronize
from ...mode import pick
from ...models import ResNet9, SmallCNN

# Quick mode: the offline image set on a CPU. Full mode: CIFAR-10 at 94% on a GPU, the target
# of the published speed-runs (airbench94, hlb-CIFAR10, Myrtle's ResNet-9).
TARGET = pick(quick=0.80, full=0.94)


@dataclass(frozen=True)
class Recipe:
    """One choice per lesson; `epochs` is how long the run trains (chosen to reach TARGET)."""

    epochs: int
    batch_size: int = 32  # 02
    one_cycle: bool = False  # 01: one-cycle schedule (AdamW) instead of a constant Adam rate
    lr: float = 1e-3  # the constant rate, or one-cycle's peak
    data_on_device: bool = False  # 03: decode once, augment and normalise on the device
    amp: bool = False  # 04: autocast in the device's fast dtype
    channels_last: bool = False  # 05
    conv_bias: bool = True  # 09: a bias before each BatchNorm (redundant)
    sync_every_step: bool = True  # 10: loss.item() each step, a host-device sync on GPUs
    fused_optimizer: bool = False  # 10: one fused/foreach kernel instead of a loop over params


BASELINE = Recipe(epochs=pick(quick=5, full=40))


def tuned_recipe(device: torch.device | None = None) -> Recipe:
    """What the course recommends on this device class: autocast and channels_last only where
    the lessons measured that they pay (tensor-core GPUs; bf16 autocast on bf16 CPUs)."""
    cls = device_class(device)
    return Recipe(
        epochs=pick(quick=4, full=24),
        batch_size=pick(quick=64, full=512),
        one_cycle=True,
        lr=pick(quick=0.01, full=0.004),
        data_on_device=True,
        amp=cls in ("cuda-tensorcore", "cpu-bf16"),
        channels_last=cls == "cuda-tensorcore",
        conv_bias=False,
        sync_every_step=False,
        fused_optimizer=True,
    )


# --- data ------------------------------------------------------------------------------------


def training_set() -> Dataset:
    """What a speed-run gets: the training split only, decoded per item (PIL image, label)."""
    return load_data(N_TRAIN(), 1, raw=True).train


def N_TRAIN() -> int | None:  # noqa: N802 - a size that follows the mode
    return pick(quick=4_000, full=None)


@functools.cache
def _held_out(source: str, n_test: int | None) -> tuple[torch.Tensor, torch.Tensor]:
    return to_tensors(load_data(1, n_test).test)


def held_out_accuracy(model: nn.Module, device: torch.device | None = None) -> float:
    """Top-1 accuracy on the test split (normalised float NCHW images), in eval mode."""
    from ...data import dataset_source

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


def loader_batches(dataset: Dataset, batch_size: int, generator: torch.Generator):
    """The newcomer's pipeline: decode, augment and normalise each image, every epoch."""
    transformed = _Transformed(dataset, train_transform())
    yield from DataLoader(
        transformed, batch_size=batch_size, shuffle=True, drop_last=True, generator=generator
    )


class _Transformed(Dataset):
    def __init__(self, dataset: Dataset, transform):
        self.dataset, self.transform = dataset, transform

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, i: int):
        image, label = self.dataset[i]
        return self.transform(image), label


def make_model(recipe: Recipe) -> nn.Module:
    if pick(quick=True, full=False):
        return SmallCNN(width=16, bias=recipe.conv_bias)
    return ResNet9(width=64, bias=recipe.conv_bias)


# --- training ----------------------------------------------------------------------------------


@dataclass
class Run:
    recipe: Recipe
    seconds: float  # training time, data preparation included, evaluation excluded
    accuracy: float  # on the held-out test split
    steps: int
    model: nn.Module | None = None

    @property
    def reached(self) -> bool:
        return self.accuracy >= TARGET


@reference
def train_recipe(recipe: Recipe, dataset: Dataset, seed: int = 0, device=None) -> Run:
    """Train a fresh model with `recipe`; time it (synchronised); judge it on held-out data."""
    device = torch.device(device) if device is not None else get_device()
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    fmt = torch.channels_last if recipe.channels_last else torch.contiguous_format
    model = make_model(recipe).to(device, memory_format=fmt)
    steps_per_epoch = len(dataset) // recipe.batch_size
    if recipe.one_cycle:
        opt = torch.optim.AdamW(model.parameters(), recipe.lr, foreach=recipe.fused_optimizer)
        sched = torch.optim.lr_scheduler.OneCycleLR(
            opt, recipe.lr, total_steps=recipe.epochs * steps_per_epoch
        )
    else:
        opt = torch.optim.Adam(model.parameters(), recipe.lr, foreach=recipe.fused_optimizer)
        sched = None
    synchronize(device)
    start, steps = time.perf_counter(), 0
    if recipe.data_on_device:
        x_all, y_all = decode_all(dataset, device)
    for _ in range(recipe.epochs):
        batches = (
            device_batches(x_all, y_all, recipe.batch_size, generator)
            if recipe.data_on_device
            else loader_batches(dataset, recipe.batch_size, generator)
        )
        for x, y in batches:
            x = x.to(device, non_blocking=True, memory_format=fmt)
            y = y.to(device, non_blocking=True)
            with autocast(device, enabled=recipe.amp, dtype=amp_dtype(device)):
                loss = nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            if sched is not None:
                sched.step()
            if recipe.sync_every_step:
                loss.item()  # the habit lesson 10 removes: a host-device sync per step
            steps += 1
    synchronize(device)
    seconds = time.perf_counter() - start
    return Run(recipe, seconds, held_out_accuracy(model, device), steps, model)


def ablation(seeds: int = 1, device=None, known: dict[str, Run] | None = None) -> list[dict]:
    """The tuned recipe, then with each technique put back to the baseline's choice.
    `known`: runs already made (by variant name, seed 0), reused rather than repeated."""
    known = known or {}
    tuned, dataset = tuned_recipe(device), training_set()
    variants = {"tuned (all techniques)": tuned}
    for f in dataclasses.fields(Recipe):
        if f.name in ("epochs", "lr"):
            continue
        base_value = getattr(BASELINE, f.name)
        if getattr(tuned, f.name) != base_value:
            changes = {f.name: base_value}
            if f.name == "one_cycle":
                changes["lr"] = BASELINE.lr
            variants[f"without {f.name}"] = dataclasses.replace(tuned, **changes)
    variants["baseline"] = BASELINE
    rows = []
    jobs = [(name, r, s) for name, r in variants.items() for s in range(seeds)]
    for name, recipe, seed in tqdm(jobs, desc="ablation", unit="run"):
        reuse = known.get(name) if seed == 0 else None
        run = reuse if reuse is not None and reuse.recipe == recipe else None
        run = run or train_recipe(recipe, dataset, seed, device)
        rows.append(
            {"variant": name, "seed": seed, "seconds": run.seconds, "accuracy": run.accuracy}
        )
    return rows


def summarise(rows: list[dict]) -> list[dict]:
    """Median seconds and accuracy per variant, with the seeds' range."""
    out = []
    for name in dict.fromkeys(r["variant"] for r in rows):
        mine = [r for r in rows if r["variant"] == name]
        secs, accs = [r["seconds"] for r in mine], [r["accuracy"] for r in mine]
        out.append(
            {
                "variant": name,
                "seconds": statistics.median(secs),
                "seconds_range": (min(secs), max(secs)),
                "accuracy": statistics.median(accs),
                "reached": sum(a >= TARGET for a in accs),
                "runs": len(mine),
            }
        )
    return out


def plot_ablation(summary: list[dict]):
    """Training time per variant, whiskers at the seeds' range; hatched where the target was
    missed (a fast run that misses the target is not a speed-up)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 0.45 * len(summary) + 1.2))
    names = [s["variant"] for s in summary]
    secs = [s["seconds"] for s in summary]
    err = [
        [s["seconds"] - s["seconds_range"][0] for s in summary],
        [s["seconds_range"][1] - s["seconds"] for s in summary],
    ]
    bars = ax.barh(names, secs, xerr=err, capsize=3, color="C0")
    for bar, s in zip(bars, summary, strict=True):
        if s["reached"] < s["runs"]:
            bar.set_hatch("//")
            bar.set_color("C3")
        ax.text(
            bar.get_width(),
            bar.get_y() + bar.get_height() / 2,
            f" {s['accuracy']:.1%}",
            va="center",
            fontsize=8,
        )
    ax.invert_yaxis()
    ax.set(
        xlabel="seconds to train (labels: held-out accuracy)",
        title=f"Ablation: each technique removed in turn (target {TARGET:.0%})",
    )
    fig.tight_layout()
    return fig


def compare_airbench(device=None) -> str:
    """airbench94 timed here, beside our own recipe, when it can run: full mode, a CUDA
    device, CIFAR-10 on disk and the `airbench` package installed. Otherwise says why not."""
    device = torch.device(device) if device is not None else get_device()
    from ...data import cifar10_on_disk, data_dir
    from ...mode import is_quick

    missing = [
        why
        for why, ok in (
            ("full mode (quick mode is on)", not is_quick()),
            ("a CUDA GPU", device.type == "cuda"),
            ("CIFAR-10 on disk", cifar10_on_disk()),
        )
        if not ok
    ]
    try:
        import airbench
    except ImportError:
        missing.append("the airbench package (pip install 'faster-pytorch-training[airbench]')")
    if missing:
        return "airbench94 not run here: needs " + ", ".join(missing) + "."
    loader = airbench.CifarLoader(
        str(data_dir()),
        train=True,
        batch_size=1024,
        aug=airbench.lib_airbench94.hyp["aug"],
        altflip=True,
    )
    test = airbench.CifarLoader(str(data_dir()), train=False, batch_size=2000)
    airbench.warmup94(train_loader=loader, verbose=False)  # compiles kernels; not timed
    synchronize(device)
    t0 = time.perf_counter()
    model = airbench.train94(train_loader=loader, verbose=False)
    synchronize(device)
    seconds = time.perf_counter() - t0
    accuracy = airbench.evaluate(model, test, tta_level=2)
    ours = train_recipe(tuned_recipe(device), training_set(), 0, device)
    return (
        f"airbench94: {seconds:.2f} s to {accuracy:.2%} (with its test-time augmentation); "
        f"this course's tuned recipe: {ours.seconds:.2f} s to {ours.accuracy:.2%}, same GPU."
    )


# --- the two loops, handed to cu.diagnose --------------------------------------------------


def baseline_loop(dataset: Dataset, device=None) -> dict:
    """The baseline's model, optimizer, loader and loop body (with its `.item()` per step),
    as `cu.diagnose(**parts)` takes them."""
    device = torch.device(device) if device is not None else get_device()
    model = make_model(BASELINE).to(device)
    optimizer = torch.optim.Adam(model.parameters(), BASELINE.lr)
    loader = DataLoader(
        _Transformed(dataset, train_transform()), batch_size=BASELINE.batch_size, shuffle=True
    )

    def step(batch) -> None:
        x, y = batch[0].to(device), batch[1].to(device)
        loss = nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=False)
        loss.backward()
        optimizer.step()
        loss.item()

    return {"model": model, "optimizer": optimizer, "loader": loader, "step": step}


def tuned_loop(dataset: Dataset, device=None) -> dict:
    """The tuned recipe's model, optimizer and batches (decoded once, on the device)."""
    device = torch.device(device) if device is not None else get_device()
    recipe = tuned_recipe(device)
    fmt = torch.channels_last if recipe.channels_last else torch.contiguous_format
    model = make_model(recipe).to(device, memory_format=fmt)
    optimizer = torch.optim.AdamW(model.parameters(), recipe.lr, foreach=True)
    x, y = decode_all(dataset, device)
    batches = list(device_batches(x, y, recipe.batch_size, torch.Generator().manual_seed(0)))
    return {"model": model, "optimizer": optimizer, "loader": batches, "amp": recipe.amp}
