"""Tip 17 measured: steps to a target training loss with and without input normalisation, and
with and without BatchNorm, on the course's SmallCNN and the offline images (decoded once and
kept as uint8, so the grid measures convergence, not loading)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from ...data import OfflineImages
from ...models import SmallCNN
from ...progress import tqdm
from .demo import BATCH

SMOOTHING = 0.9  # the curves and the target read an exponential moving average of the loss
SAME = 0.15  # "no clear gain" within 15%: the BatchNorm pair differed by 0-14% over targets 2.0-1.6 (one quick run, cpu-bf16)
LR = 0.1  # SGD with momentum 0.9, the same for all four runs: one recipe, four pipelines


def uint8_images(
    n: int, *, train: bool = True, size: int = 32
) -> tuple[torch.Tensor, torch.Tensor]:
    """`n` offline images as a uint8 (N, 3, size, size) tensor and their labels, decoded once;
    size 16 averages 2x2 pixels (quick mode: a quarter of the arithmetic per step)."""
    data = OfflineImages(n, train=train)
    images = torch.stack(
        [torch.from_numpy(np.array(data[i][0])).permute(2, 0, 1) for i in range(n)]
    )
    if size != images.shape[-1]:
        k = images.shape[-1] // size
        images = nn.functional.avg_pool2d(images.float(), k).round().to(torch.uint8)
    return images, torch.tensor(data.targets[:n])


def loaders(
    train: tuple[torch.Tensor, torch.Tensor], test: tuple[torch.Tensor, torch.Tensor]
) -> tuple[DataLoader, DataLoader]:
    """uint8 (images, labels) batches of the training and the test split, in a fixed order."""
    return DataLoader(TensorDataset(*train), BATCH), DataLoader(TensorDataset(*test), BATCH)


@dataclass
class Run:
    """One training run of the grid: the smoothed loss after every step."""

    batchnorm: bool
    normalised: bool
    seed: int
    losses: list[float] = field(default_factory=list)

    @property
    def label(self) -> str:
        bn = "BatchNorm" if self.batchnorm else "no BatchNorm"
        return f"{bn}, {'normalised' if self.normalised else 'x/255'} input"

    def steps_to(self, target: float) -> int | None:
        """First step whose smoothed loss is at or below `target`; None if none was."""
        return next((i + 1 for i, loss in enumerate(self.losses) if loss <= target), None)


def _train(
    run: Run, images: torch.Tensor, labels: torch.Tensor, prep: Callable, steps: int, bar
) -> Run:
    torch.manual_seed(run.seed)  # the same initial weights for both inputs of a model
    model = SmallCNN(width=8, norm=run.batchnorm)
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    order = torch.Generator().manual_seed(run.seed)  # and the same batches
    ema = None
    for _ in range(steps):
        idx = torch.randint(0, len(images), (BATCH,), generator=order)
        loss = nn.functional.cross_entropy(model(prep(images[idx])), labels[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        value = loss.item()
        ema = value if ema is None else SMOOTHING * ema + (1 - SMOOTHING) * value
        run.losses.append(ema)
        bar.update(1)
    return run


def convergence_grid(
    normalise: Callable[[torch.Tensor], torch.Tensor],
    images: torch.Tensor,
    labels: torch.Tensor,
    *,
    steps: int,
    seeds: int = 1,
    progress: bool = True,
) -> list[Run]:
    """Train SmallCNN with and without BatchNorm, on `normalise(images)` and on images / 255
    (what ToTensor gives), `steps` SGD steps each, for `seeds` seeds."""
    plain = lambda x: x.float() / 255  # noqa: E731
    grid = [(bn, nz, s) for bn in (True, False) for nz in (True, False) for s in range(seeds)]
    with tqdm(total=len(grid) * steps, desc="tip 17 grid", disable=not progress) as bar:
        return [
            _train(Run(bn, nz, s), images, labels, normalise if nz else plain, steps, bar)
            for bn, nz, s in grid
        ]


def median_steps(runs: list[Run], target: float) -> dict[str, int | None]:
    """label -> median steps to `target` over the seeds (None when most runs never got there)."""
    out: dict[str, int | None] = {}
    for label in dict.fromkeys(r.label for r in runs):
        got = sorted(r.steps_to(target) or 10**9 for r in runs if r.label == label)
        mid = got[len(got) // 2]
        out[label] = None if mid == 10**9 else mid
    return out


def target_loss(runs: list[Run]) -> float:
    """The smoothed loss the slowest pipeline ended at (median over seeds): every pipeline has
    a step count to it, and the others' counts say how much sooner they got there."""
    finals: dict[str, list[float]] = {}
    for r in runs:
        finals.setdefault(r.label, []).append(r.losses[-1])
    return round(max(sorted(v)[len(v) // 2] for v in finals.values()), 3)


def describe(runs: list[Run], target: float) -> str:
    """Markdown: steps to the target per pipeline, and what normalising the input changed with
    and without BatchNorm, every figure from this run."""
    steps = median_steps(runs, target)
    budget = len(runs[0].losses)
    show = lambda s: f"{s} steps" if s is not None else f"not within {budget} steps"  # noqa: E731
    lines = [f"- {label}: {show(s)}" for label, s in steps.items()]
    for bn in ("BatchNorm", "no BatchNorm"):
        a, b = steps.get(f"{bn}, normalised input"), steps.get(f"{bn}, x/255 input")
        if a is not None and b is not None:
            same = abs(a / b - 1) <= SAME
            lines.append(
                f"- **{bn}**: normalised input took {a / b:.2f}x the steps of x/255 ({a} vs {b}): "
                + (f"within {SAME:.0%}, no clear gain" if same else ("fewer" if a < b else "more"))
            )
    seeds = len({r.seed for r in runs})
    return (
        f"Steps to a smoothed training loss of {target} (median of {seeds} seed(s), "
        f"{budget} steps each):\n\n" + "\n".join(lines)
    )


def plot_convergence(runs: list[Run], target: float):
    """The smoothed loss curves of the grid (seed 0), with the target."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.5))
    styles = {
        (True, True): "C0-",
        (True, False): "C0--",
        (False, True): "C3-",
        (False, False): "C3--",
    }
    for r in runs:
        if r.seed == 0:
            ax.plot(
                range(1, len(r.losses) + 1),
                r.losses,
                styles[(r.batchnorm, r.normalised)],
                label=r.label,
            )
    ax.axhline(target, color="grey", linestyle=":", label=f"target {target}")
    ax.set(xlabel="SGD step", ylabel="training loss (smoothed)", title="tip 17: steps to target")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig
