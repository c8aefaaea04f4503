"""Lesson 02's regression with a known answer: linear regression with Gaussian inputs, where
the mean gradient G and the per-sample gradient covariance Sigma have closed forms, so the
gradient noise scale B_simple = tr(Sigma) / |G|^2 (McCandlish et al. 2018, arXiv:1812.06162)
is known; SGD on it at many batch sizes (course_utils.quadratic, which lesson 02b shares)
shows perfect scaling, then diminishing returns past the critical batch."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from ...measure import steady_cpu
from ...quadratic import DEMO, demo_scales


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


def noise_scale_start_and_end(estimator: Callable, n: int = 200) -> dict[str, tuple[float, float]]:
    """B_simple of the demo regression where training starts and where it reaches the target
    (following full-batch gradient descent there): {where: (estimated by `estimator`, exact)}.

    The batch sizes given to the estimator are scaled to each point's noise scale.
    """
    dim, target = DEMO["dim"], DEMO["target"]
    scales = demo_scales()
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
