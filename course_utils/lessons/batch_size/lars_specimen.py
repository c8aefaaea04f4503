"""The specimen check 02-trust-ratio trains, and LARS with each plausible mistake, so that the
check can name a mistake only when that mistake reproduces the learner's updates.

Each layer of the specimen hides no mistake another layer shows: weight norms far from 1 (40
and 0.05), weight decay as large as the gradient on one layer, biases and a BatchNorm scale,
a zero-initialised layer, a layer whose gradient is zero, and two param groups whose settings
differ from each other and from the optimizer's defaults."""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import torch

# the optimizer's defaults: every group overrides all of them, so reading them is a mistake
DEFAULTS = dict(lr=0.3, momentum=0.8, weight_decay=1e-3, trust_coef=0.01, eps=1e-8)
GROUPS = [
    dict(lr=0.5, momentum=0.9, weight_decay=5e-3, trust_coef=0.02, eps=1e-8),
    dict(lr=2.0, momentum=0.5, weight_decay=0.0, trust_coef=0.05, eps=1e-9),
]
STEPS = 3


@dataclass(frozen=True)
class Layer:
    name: str
    group: int
    shape: tuple[int, ...]
    weight_norm: float
    grad_norm: float


LAYERS = [
    Layer("conv weight with |w| = 40", 0, (8, 4, 3, 3), 40.0, 0.2),
    Layer("linear weight with |w| = 0.05", 0, (16, 8), 0.05, 2.0),
    Layer("bias (1-D)", 0, (16,), 1.0, 0.3),
    Layer("BatchNorm weight (1-D)", 0, (8,), math.sqrt(8), 0.1),
    Layer("zero-initialised weight", 0, (10, 16), 0.0, 0.5),
    Layer("second group's weight", 1, (32, 4), 3.0, 0.1),
    Layer("second group's weight without gradient", 1, (4, 4), 2.0, 0.0),
    Layer("second group's bias (1-D)", 1, (4,), 0.5, 0.2),
]


def _scaled(shape: tuple[int, ...], norm: float, gen: torch.Generator) -> torch.Tensor:
    x = torch.randn(shape, generator=gen)
    return x * (norm / x.norm()) if norm > 0 else torch.zeros(shape)


def initial_weights() -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(5)
    return [_scaled(layer.shape, layer.weight_norm, gen) for layer in LAYERS]


def gradients() -> list[list[torch.Tensor]]:
    """One gradient per layer per step, fresh directions each step, norms fixed per layer."""
    gen = torch.Generator().manual_seed(6)
    return [[_scaled(la.shape, la.grad_norm, gen) for la in LAYERS] for _ in range(STEPS)]


def param_groups(params: list[torch.Tensor]) -> list[dict]:
    return [
        dict(params=[p for p, la in zip(params, LAYERS, strict=True) if la.group == g], **s)
        for g, s in enumerate(GROUPS)
    ]


# --- LARS with mistakes: the update each one makes ----------------------------------------------

MISTAKES = {
    "global_norm": "norms taken over all layers at once, not per layer",
    "adapt_1d": "biases and BatchNorm parameters adapted and decayed too (they keep ratio 1 and "
    "no weight decay)",
    "decay_1d": "weight decay applied to biases and BatchNorm parameters (they get none)",
    "no_wd_denominator": "weight decay missing from the ratio's denominator |g| + wd |w|",
    "no_wd_direction": "weight decay missing from the update direction g + wd w",
    "wd_after_ratio": "weight decay added after the trust ratio (the ratio scales g + wd w)",
    "no_weight_norm": "the weight norm |w| missing from the numerator (the ratio is "
    "eta |w| / (|g| + wd |w|))",
    "no_trust_coef": "the trust coefficient eta left out",
    "clip_ratio": "the trust ratio clipped at 1 (that is LARC, NVIDIA's variant; LARS does "
    "not clip)",
    "zero_ratio": "a zero-norm layer given ratio 0 (it must get 1, or it never moves)",
    "no_eps": "neither eps nor ratio 1 for a zero gradient: a layer without gradient divides "
    "by zero and its weights become NaN (add eps to the denominator, or give it ratio 1)",
    "defaults": "the optimizer's defaults used instead of each param group's settings",
    "first_group": "the first param group's settings used for every group",
    "ratio_after_momentum": "the trust ratio applied to the momentum buffer (it scales the "
    "new gradient before it enters the buffer)",
    "no_momentum": "momentum left out",
    "not_in_place": "parameters never updated in place (assigning to p rebinds a name)",
}


def simulate(mistakes: frozenset[str] = frozenset()) -> list[list[torch.Tensor]]:
    """The specimen's weights after each step under LARS with `mistakes` (none: the answer)."""
    ws = [w.clone() for w in initial_weights()]
    bufs = [torch.zeros_like(w) for w in ws]
    out = []
    for grads in gradients():
        settings = [_settings(la.group, mistakes) for la in LAYERS]
        if "global_norm" in mistakes:
            w_all = torch.cat([w.flatten() for w in ws]).norm()
            g_all = torch.cat([g.flatten() for g in grads]).norm()
        new = []
        for i, (w, g, s) in enumerate(zip(ws, grads, settings, strict=True)):
            wd, eta, eps = s["weight_decay"], s["trust_coef"], s["eps"]
            one_d = w.ndim == 1 and "adapt_1d" not in mistakes
            if one_d:
                d = g + wd * w if "decay_1d" in mistakes else g
                ratio = torch.tensor(1.0)
            else:
                wn, gn = (w_all, g_all) if "global_norm" in mistakes else (w.norm(), g.norm())
                den = gn + (0 if "no_wd_denominator" in mistakes else wd * wn)
                den = den + (0 if "no_eps" in mistakes else eps)
                num = (1.0 if "no_trust_coef" in mistakes else eta) * (
                    1.0 if "no_weight_norm" in mistakes else wn
                )
                ratio = num / den if "no_eps" in mistakes else num / den.clamp_min(1e-38)
                if "clip_ratio" in mistakes:
                    ratio = torch.clamp(ratio, max=1.0)
                zero = wn == 0 or (gn == 0 and "no_eps" not in mistakes)
                if zero and "zero_ratio" not in mistakes:
                    ratio = torch.tensor(1.0)
                d = (
                    g
                    if "no_wd_direction" in mistakes or "wd_after_ratio" in mistakes
                    else g + wd * w
                )
            mom = 0.0 if "no_momentum" in mistakes else s["momentum"]
            if "ratio_after_momentum" in mistakes:
                bufs[i] = mom * bufs[i] + d
                step = ratio * bufs[i]
            else:
                bufs[i] = mom * bufs[i] + ratio * d
                step = bufs[i]
            if "wd_after_ratio" in mistakes and not one_d:
                step = step + wd * w
            new.append(w if "not_in_place" in mistakes else w - s["lr"] * step)
        ws = new
        out.append([w.clone() for w in ws])
    return out


def _settings(group: int, mistakes: frozenset[str]) -> dict:
    if "defaults" in mistakes:
        return DEFAULTS
    return GROUPS[0] if "first_group" in mistakes else GROUPS[group]


def close(got: torch.Tensor, want: torch.Tensor, start: torch.Tensor) -> bool:
    """The moves from `start` agree to 0.1% of the largest element of LARS's move, far above
    float32 rounding in another order (1e-5 of it here) and far below the smallest mistake
    (a few percent); non-finite weights never agree."""
    moved_got, moved_want = got.double() - start.double(), want.double() - start.double()
    scale = float(moved_want.abs().max()) if moved_want.numel() else 0.0
    return bool(torch.isfinite(got).all()) and bool(
        torch.allclose(moved_got, moved_want, rtol=1e-3, atol=1e-3 * scale + 1e-7)
    )


def explain(got: list[list[torch.Tensor]]) -> frozenset[str] | None:
    """The smallest set of at most two mistakes whose updates reproduce `got` on every layer
    and step, or None: only a set that reproduces everything is named as the cause."""
    singles = [frozenset([m]) for m in MISTAKES]
    pairs = [frozenset(p) for p in itertools.combinations(MISTAKES, 2)]
    start = initial_weights()
    for mistakes in singles + pairs:
        want = simulate(mistakes)
        if all(
            _same(g, w, s)
            for step_g, step_w in zip(got, want, strict=True)
            for g, w, s in zip(step_g, step_w, start, strict=True)
        ):
            return mistakes
    return None


def _same(got: torch.Tensor, want: torch.Tensor, start: torch.Tensor) -> bool:
    if not torch.isfinite(want).all():
        return not torch.isfinite(got).all()
    return close(got, want, start)
