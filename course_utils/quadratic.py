"""SGD on a noisy linear regression (a quadratic loss), simulated at many batch sizes and
learning rates at once: the problem on which lesson 02 measures the critical batch size and
lesson 02b what linear LR scaling buys in steps to a target. Its steps cost microseconds, so
a grid of batches x LRs x seeds that no network could afford runs in seconds.

The regression: y = x.w* + noise with x ~ N(0, diag(scales)), scales from 1 down to
1/condition; the excess loss of weights w* + delta is delta' diag(scales) delta / 2. Its
gradient noise scale has a closed form (lesson 02's NoisyRegression, after McCandlish et al.
2018, arXiv:1812.06162)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from .measure import steady_cpu
from .progress import tqdm

# The regression both lessons train: 16 weights, input scales from 1 down to 1/30, label noise
# variance 1, starting at |delta| = 6, trained until the excess loss is 0.02.
DEMO = {"dim": 16, "condition": 30.0, "noise_var": 1.0, "start": 6.0, "target": 0.02}


def demo_scales(dim: int = DEMO["dim"], condition: float = DEMO["condition"]) -> torch.Tensor:
    """The input variances of the regression: log-spaced from 1 down to 1/condition."""
    return torch.logspace(0, -math.log10(condition), dim)


def steps_to_target(
    batch_sizes: Sequence[int],
    *,
    dim: int = DEMO["dim"],
    condition: float = DEMO["condition"],
    noise_var: float = DEMO["noise_var"],
    start: float = DEMO["start"],
    target: float = DEMO["target"],
    lrs: Sequence[float] | None = None,
    seeds: int = 4,
    max_steps: int = 5000,
) -> dict[int, tuple[float, float]]:
    """SGD on the regression, for each batch size and each LR of a grid (all run at once,
    `seeds` runs each): the fewest steps, averaged over seeds, until the excess loss
    delta'L delta/2 <= target, and the LR that achieved it.

    Returns {batch: (steps, best lr)}.
    """
    gen = torch.Generator().manual_seed(0)
    scales = demo_scales(dim, condition)
    grid = torch.tensor(lrs if lrs is not None else torch.logspace(-3, 0.5, 22).tolist())
    lr = grid.repeat_interleave(seeds)[:, None]  # one row per (LR, seed) run, all stepped at once
    out = {}
    for b in tqdm(list(batch_sizes), desc="steps to target", leave=False):
        delta = torch.full((len(lr), dim), start / math.sqrt(dim))
        reached = torch.full((len(lr),), -1)
        with steady_cpu():  # many tiny ops: one thread avoids thread thrash on a busy CPU
            for s in range(1, max_steps + 1):
                x = torch.randn(len(lr), b, dim, generator=gen) * scales.sqrt()
                noise = math.sqrt(noise_var) * torch.randn(len(lr), b, generator=gen)
                residual = torch.einsum("cbd,cd->cb", x, delta) - noise
                delta = delta - lr * torch.einsum("cbd,cb->cd", x, residual) / b
                excess = 0.5 * (delta.pow(2) * scales).sum(1)
                reached[(excess <= target) & (reached < 0)] = s
                if (reached >= 0).view(len(grid), seeds).all(1).any():
                    break  # some LR has reached the target in every seed: it is the best
        steps = reached.view(len(grid), seeds).float()
        mean = torch.where((steps > 0).all(1), steps.mean(1), torch.tensor(float("inf")))
        best = int(mean.argmin())
        out[b] = (float(mean[best]), float(grid[best]))
    return out


def steps_with_schedule(
    batch: int, lr_at: Callable[[int], float], *, seeds: int = 8, max_steps: int = 3000
) -> float:
    """SGD on the regression at `batch` with LR `lr_at(step)`: the mean number of steps until
    the excess loss reaches the target (inf when some seed diverges or never gets there)."""
    dim, target = DEMO["dim"], DEMO["target"]
    gen = torch.Generator().manual_seed(1)
    scales = demo_scales()
    delta = torch.full((seeds, dim), DEMO["start"] / math.sqrt(dim))
    reached = torch.full((seeds,), -1)
    with steady_cpu():
        for s in range(1, max_steps + 1):
            x = torch.randn(seeds, batch, dim, generator=gen) * scales.sqrt()
            noise = math.sqrt(DEMO["noise_var"]) * torch.randn(seeds, batch, generator=gen)
            residual = torch.einsum("cbd,cd->cb", x, delta) - noise
            delta = delta - lr_at(s - 1) * torch.einsum("cbd,cb->cd", x, residual) / batch
            excess = 0.5 * (delta.pow(2) * scales).sum(1)
            reached[(excess <= target) & (reached < 0)] = s
            if (reached > 0).all() or not torch.isfinite(excess).all():
                break
    return float(reached.float().mean()) if (reached > 0).all() else math.inf
