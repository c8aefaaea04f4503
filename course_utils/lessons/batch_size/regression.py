"""Lesson 02's regression with a known answer: linear regression with Gaussian inputs, where
the mean gradient G and the per-sample gradient covariance Sigma have closed forms, so the
gradient noise scale B_simple = tr(Sigma) / |G|^2 (McCandlish et al. 2018, arXiv:1812.06162)
is known; SGD on it at many batch sizes shows perfect scaling, then diminishing returns past
the critical batch, and what the linear LR scaling rule buys in time to a target."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
from torch import nn

from ...measure import steady_cpu
from ...progress import tqdm


class NoisyRegression:
    """y = x.w* + sigma*eps with x ~ N(0, diag(scales)); the model's weight is w* + delta.

    Per-sample loss (x.w - y)^2 / 2 has gradient g = x (x.delta - sigma*eps), so (Isserlis):
    G = L delta and Sigma = (delta'L delta + sigma^2) L + L delta delta' L, with L = diag(scales).
    """

    def __init__(
        self,
        dim: int = 32,
        noise_var: float = 2.0,
        delta_norm: float = 1.0,
        scales=None,
        seed: int = 0,
        delta=None,
    ):
        self.gen = torch.Generator().manual_seed(seed)
        self.scales = (
            torch.ones(dim) if scales is None else torch.as_tensor(scales, dtype=torch.float32)
        )
        self.noise_var = noise_var
        direction = torch.randn(dim, generator=self.gen)
        self.delta = (
            direction / direction.norm() * delta_norm
            if delta is None
            else torch.as_tensor(delta, dtype=torch.float32)
        )
        self.w_star = torch.randn(dim, generator=self.gen)
        self.model = nn.Linear(dim, 1, bias=False)
        with torch.no_grad():
            self.model.weight.copy_((self.w_star + self.delta)[None])

    def gradient(self, batch_size: int) -> torch.Tensor:
        """The mean gradient over a fresh batch of `batch_size` samples (flat, detached)."""
        x = torch.randn(batch_size, len(self.scales), generator=self.gen) * self.scales.sqrt()
        y = x @ self.w_star + math.sqrt(self.noise_var) * torch.randn(
            batch_size, generator=self.gen
        )
        loss = 0.5 * (self.model(x).squeeze(-1) - y).pow(2).mean()
        (grad,) = torch.autograd.grad(loss, self.model.weight)
        return grad.flatten()

    @property
    def grad_sq_norm(self) -> float:
        """|G|^2, the squared norm of the true (full-data) gradient."""
        return float((self.scales * self.delta).pow(2).sum())

    @property
    def trace_sigma(self) -> float:
        """tr(Sigma), the total variance of one per-sample gradient."""
        quad = float((self.delta.pow(2) * self.scales).sum())
        return (quad + self.noise_var) * float(self.scales.sum()) + self.grad_sq_norm

    @property
    def b_simple(self) -> float:
        return self.trace_sigma / self.grad_sq_norm


# The regression the critical-batch demo trains: 16 weights, input scales from 1 down to 1/30,
# label noise variance 1, starting at |delta| = 6, trained until the excess loss is 0.02.
DEMO = {"dim": 16, "condition": 30.0, "noise_var": 1.0, "start": 6.0, "target": 0.02}


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
    """SGD on a NoisyRegression (input scales from 1 down to 1/condition), for each batch size
    and each LR of a grid (all run at once, `seeds` runs each): the fewest steps, averaged over
    seeds, until the excess loss delta'L delta/2 <= target, and the LR that achieved it.

    Returns {batch: (steps, best lr)}.
    """
    gen = torch.Generator().manual_seed(0)
    scales = torch.logspace(0, -math.log10(condition), dim)
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


def noise_scale_start_and_end(estimator: Callable, n: int = 200) -> dict[str, tuple[float, float]]:
    """B_simple of the demo regression where training starts and where it reaches the target
    (following full-batch gradient descent there): {where: (estimated by `estimator`, exact)}.

    The batch sizes given to the estimator are scaled to each point's noise scale.
    """
    dim, target = DEMO["dim"], DEMO["target"]
    scales = torch.logspace(0, -math.log10(DEMO["condition"]), dim)
    start = torch.full((dim,), DEMO["start"] / math.sqrt(dim))
    end = start.clone()
    while 0.5 * float((end.pow(2) * scales).sum()) > target:
        end = end - scales * end  # gradient descent with LR 1 (the Hessian is diag(scales))
    out = {}
    for where, delta, (b_small, b_big) in [("start", start, (2, 16)), ("target", end, (512, 4096))]:
        problem = NoisyRegression(dim, DEMO["noise_var"], scales=scales, seed=3, delta=delta)
        with steady_cpu():
            out[where] = (float(estimator(problem.gradient, b_small, b_big, n)), problem.b_simple)
    return out


def fit_critical_batch(results: dict[int, tuple[float, float]]) -> tuple[float, float]:
    """Fit McCandlish's S = S_min (1 + B_crit / B) to {batch: (steps, lr)}: (S_min, B_crit).

    Least squares on the relative error, since steps span orders of magnitude.
    """
    b = torch.tensor([float(k) for k in results], dtype=torch.float64)
    s = torch.tensor([v[0] for v in results.values()], dtype=torch.float64)
    design = torch.stack([torch.ones_like(b), 1 / b], 1) / s[:, None]
    coef = torch.linalg.lstsq(design, torch.ones_like(s)[:, None]).solution.flatten()
    return float(coef[0]), float(coef[1] / coef[0])


def plot_critical_batch(
    results: dict[int, tuple[float, float]], s_min: float, b_crit: float, linear_from: int = 8
):
    """Left: steps to the target vs batch size, with the fit S_min (1 + B_crit / B) and perfect
    scaling. Right: the best LR vs batch size, with the linear scaling rule from `linear_from`."""
    import matplotlib.pyplot as plt

    b = list(results)
    steps, lrs = [v[0] for v in results.values()], [v[1] for v in results.values()]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    left.plot(b, steps, "o", label="measured (best LR for each batch)")
    left.plot(
        b,
        [s_min * (1 + b_crit / x) for x in b],
        "-",
        label=f"S_min(1 + B_crit/B): B_crit = {b_crit:.0f}",
    )
    left.plot(
        b,
        [steps[0] * b[0] / x for x in b],
        ":",
        color="grey",
        label="perfect scaling (steps x 1/B)",
    )
    left.axvline(b_crit, color="C3", linestyle="--", alpha=0.6)
    left.set(
        xscale="log",
        yscale="log",
        xlabel="batch size B",
        ylabel="steps to target",
        title="steps to the target loss",
    )
    base = lrs[b.index(linear_from)]
    right.plot(b, lrs, "o-", label="best LR found")
    right.plot(
        b,
        [base * x / linear_from for x in b],
        ":",
        color="grey",
        label=f"linear scaling from B={linear_from}",
    )
    right.axvline(b_crit, color="C3", linestyle="--", alpha=0.6)
    right.set(
        xscale="log",
        yscale="log",
        xlabel="batch size B",
        ylabel="learning rate",
        title="best learning rate",
        ylim=(min(lrs) / 2, max(lrs) * 4),
    )
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def steps_with_schedule(
    batch: int, lr_at: Callable[[int], float], *, seeds: int = 8, max_steps: int = 3000
) -> float:
    """SGD on the demo regression at `batch` with LR `lr_at(step)`: the mean number of steps
    until the excess loss reaches the target (inf when some seed diverges or never gets there)."""
    dim, target = DEMO["dim"], DEMO["target"]
    gen = torch.Generator().manual_seed(1)
    scales = torch.logspace(0, -math.log10(DEMO["condition"]), dim)
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


def time_to_target(seconds_per_step, base_batch, base_lr, warmup_steps=10):
    """{rule: {batch: (steps, seconds)}}: SGD steps until the regression reaches its target
    under each LR rule, times the seconds per step measured on this device at that batch."""

    def scaled(b):  # Goyal et al. 2017: base LR at step 0, k x base LR from warmup_steps on
        k = b / base_batch
        return lambda t: base_lr * (1 + (k - 1) * min(t, warmup_steps) / warmup_steps)

    rules = {"same LR": lambda b: lambda t: base_lr, "linear scaling + warm-up": scaled}
    out = {}
    for name, rule in tqdm(rules.items(), desc="time to target", leave=False):
        out[name] = {}
        for b, seconds in seconds_per_step.items():
            steps = steps_with_schedule(b, rule(b))  # mean of 8 seeds, inf if one diverges
            out[name][b] = (steps, steps * seconds)  # time = steps x seconds per step
    return out


def plot_time_to_target(results: dict[str, dict[int, tuple[float, float]]]):
    """Seconds to the target against batch size, one line per LR rule (diverged runs: gaps)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for name, runs in results.items():
        b = [k for k, v in runs.items() if math.isfinite(v[1])]
        ax.plot(b, [runs[k][1] for k in b], "o-", label=name)
    ax.set(xscale="log", yscale="log", xlabel="batch size", ylabel="seconds to the target")
    ax.set_title("time to target = steps x seconds per step")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    return fig
