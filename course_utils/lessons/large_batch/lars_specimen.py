"""The specimen check 02b-trust-ratio trains, and LARS with each plausible mistake, so that the
check can name a mistake only when that mistake reproduces the learner's updates.

Each layer of the specimen hides no mistake another layer shows: weight norms far from 1 (40
and 0.05), weight decay as large as the gradient on one layer, biases and a BatchNorm scale,
a zero-initialised layer, a layer whose gradient is zero in each group (with weight decay, where
a ratio other than 1 moves it; without, where a missing eps divides 0 by 0), and two param
groups whose settings differ from each other and from the optimizer's defaults. The check
changes each group's LR between steps as a warm-up scheduler does (`LR_SCHEDULE`): while it
is constant, LR applied inside the momentum buffer and outside it move weights identically."""

from __future__ import annotations

import functools
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
# each group's LR at step t is its lr times LR_SCHEDULE[t], set by the check before the step
# as a linear warm-up sets it (the defaults are not scheduled: a scheduler writes the groups)
LR_SCHEDULE = (1 / 3, 2 / 3, 1.0)


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
    Layer("weight without gradient, with weight decay", 0, (6, 4), 1.5, 0.0),
    Layer("second group's weight", 1, (32, 4), 3.0, 0.1),
    Layer("second group's weight without gradient", 1, (4, 4), 2.0, 0.0),
    Layer("second group's bias (1-D)", 1, (4,), 0.5, 0.2),
]


def _scaled(shape: tuple[int, ...], norm: float, gen: torch.Generator) -> torch.Tensor:
    x = torch.randn(shape, generator=gen)
    return x * (norm / x.norm()) if norm > 0 else torch.zeros(shape)


@functools.cache
def _initial() -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(5)
    return tuple(_scaled(layer.shape, layer.weight_norm, gen) for layer in LAYERS)


@functools.cache
def _gradients() -> tuple[tuple[torch.Tensor, ...], ...]:
    gen = torch.Generator().manual_seed(6)
    return tuple(tuple(_scaled(la.shape, la.grad_norm, gen) for la in LAYERS) for _ in range(STEPS))


def initial_weights() -> list[torch.Tensor]:
    """Fresh copies (drawn once: `explain` replays LARS hundreds of times)."""
    return [w.clone() for w in _initial()]


def gradients() -> list[list[torch.Tensor]]:
    """One gradient per layer per step, fresh directions each step, norms fixed per layer."""
    return [[g.clone() for g in step] for step in _gradients()]


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
    "wd_after_ratio": "weight decay added after the trust ratio, d = ratio g + wd w (the ratio "
    "scales the whole direction, ratio (g + wd w))",
    "wd_after_momentum": "weight decay added to the step outside the momentum buffer, after the "
    "trust ratio (the ratio scales g + wd w, and the buffer holds it)",
    "no_weight_norm": "the weight norm |w| missing from the numerator (the ratio is "
    "eta |w| / (|g| + wd |w|))",
    "no_trust_coef": "the trust coefficient eta left out",
    "clip_ratio": "the trust ratio clipped at 1 (that is LARC, NVIDIA's variant; LARS does "
    "not clip)",
    "zero_ratio": "no ratio 1 for a zero norm: a zero-norm layer keeps eta |w| / (|g| + wd |w| "
    "+ eps), ratio 0 for a zero-initialised one, which never moves (both |w| = 0 and |g| = 0 "
    "get ratio 1)",
    "guard_grad_only": "ratio 1 given only where |g| = 0, not where |w| = 0: a zero-initialised "
    "layer gets ratio 0 and never moves",
    "no_eps": "neither eps nor ratio 1 for a zero gradient: a layer without gradient divides "
    "by zero and its weights become NaN (add eps to the denominator, or give it ratio 1)",
    "guard_zero": "ratio 0, not 1, for a zero norm: a tensor whose weight norm or gradient norm "
    "is 0 never moves: a zero-initialised layer stays at zero, and a layer without gradient "
    "never takes its weight decay",
    "ratio_1d": "a trust ratio applied to biases and BatchNorm parameters, though without "
    "weight decay (1-D tensors take ratio 1: plain momentum-SGD steps)",
    "inverted_exclusion": "the exclusion inverted: weight matrices and kernels take plain "
    "momentum-SGD steps, while the biases and BatchNorm parameters (1-D tensors) get the trust "
    "ratio and weight decay",
    "guard_weight_only": "ratio 1 given only where |w| = 0, not where |g| = 0: a weight without "
    "gradient gets eta |w| / (wd |w| + eps) and its weight decay is scaled by that",
    "first_group": "the first param group's settings used for every group",
    "ratio_after_momentum": "the trust ratio applied to the momentum buffer (it scales the "
    "new gradient before it enters the buffer)",
    "no_momentum": "momentum left out",
    "lr_in_buffer": "the LR multiplied into each update before it enters the buffer "
    "(buf = m buf + lr ratio d, p -= buf, as the paper's algorithm 1 writes it): the exercise "
    "asks for torch.optim.SGD's convention, buf = m buf + ratio d, p -= lr buf, and the two "
    "differ once the LR changes between steps, as warm-up changes it",
    "not_in_place": "parameters never updated in place (assigning to p rebinds a name)",
}


def simulate(
    mistakes: frozenset[str] = frozenset(), from_defaults: frozenset[str] = frozenset()
) -> list[list[torch.Tensor]]:
    """The specimen's weights after each step under LARS with `mistakes` (none: the answer)
    and the settings named in `from_defaults` read from DEFAULTS instead of the groups."""
    ws = initial_weights()
    bufs = [torch.zeros_like(w) for w in ws]
    out = []
    for t, grads in enumerate(gradients()):
        settings = [_settings(la.group, t, mistakes, from_defaults) for la in LAYERS]
        every = None  # the norms of all tensors at once, under global_norm
        if "global_norm" in mistakes:
            every = (
                torch.cat([w.flatten() for w in ws]).norm(),
                torch.cat([g.flatten() for g in grads]).norm(),
            )
        new = []
        for i, (w, g, s) in enumerate(zip(ws, grads, settings, strict=True)):
            wd = s["weight_decay"]
            adapted = (w.ndim > 1) != ("inverted_exclusion" in mistakes)
            one_d = not (adapted or "adapt_1d" in mistakes)
            if one_d:
                d = g + wd * w if "decay_1d" in mistakes else g
                ratio = torch.tensor(1.0)
                if "ratio_1d" in mistakes:  # no weight decay, so none in the ratio either
                    ratio = _ratio(w, g, 0.0, s, mistakes, every)
            else:
                ratio = _ratio(w, g, wd, s, mistakes, every)
                later = {"no_wd_direction", "wd_after_ratio", "wd_after_momentum"}
                d = g if mistakes & later else g + wd * w
            mom = 0.0 if "no_momentum" in mistakes else s["momentum"]
            inside, outside = (s["lr"], 1.0) if "lr_in_buffer" in mistakes else (1.0, s["lr"])
            late = 0.0 if one_d else wd * w  # weight decay added after the ratio
            if "ratio_after_momentum" in mistakes:
                bufs[i] = mom * bufs[i] + inside * d
                step = ratio * bufs[i]
            else:
                added = late if "wd_after_ratio" in mistakes else 0.0
                bufs[i] = mom * bufs[i] + inside * (ratio * d + added)
                step = bufs[i]
            if "wd_after_momentum" in mistakes:
                step = step + inside * late
            new.append(w if "not_in_place" in mistakes else w - outside * step)
        ws = new
        out.append([w.clone() for w in ws])
    return out


def _ratio(
    w: torch.Tensor, g: torch.Tensor, wd: float, s: dict, mistakes: frozenset[str], every
) -> torch.Tensor:
    """A tensor's trust ratio under `mistakes`, weight decay `wd` in its denominator; `every`:
    the norms of all tensors at once (global_norm), else None."""
    wn, gn = every if every is not None else (w.norm(), g.norm())
    den = gn + (0 if "no_wd_denominator" in mistakes else wd * wn)
    den = den + (0 if "no_eps" in mistakes else s["eps"])
    num = (1.0 if "no_trust_coef" in mistakes else s["trust_coef"]) * (
        1.0 if "no_weight_norm" in mistakes else wn
    )
    ratio = num / den if "no_eps" in mistakes else num / den.clamp_min(1e-38)
    if "clip_ratio" in mistakes:
        ratio = torch.clamp(ratio, max=1.0)
    guard_w = "guard_grad_only" not in mistakes
    guard_g = not mistakes & {"no_eps", "guard_weight_only"}
    if (wn == 0 and guard_w) or (gn == 0 and guard_g):
        if "guard_zero" in mistakes:
            return torch.tensor(0.0)
        if "zero_ratio" not in mistakes:
            return torch.tensor(1.0)
    return ratio


def _settings(group: int, t: int, mistakes: frozenset[str], from_defaults: frozenset[str]) -> dict:
    """Step t's settings as the update reads them: the group's (the first group's under
    `first_group`), its LR scheduled, and the keys in `from_defaults` from DEFAULTS."""
    s = dict(GROUPS[0] if "first_group" in mistakes else GROUPS[group])
    s["lr"] *= LR_SCHEDULE[t]
    return {k: DEFAULTS[k] if k in from_defaults else v for k, v in s.items()}


def close(got: torch.Tensor, want: torch.Tensor, start: torch.Tensor) -> bool:
    """The moves from `start` agree to 0.1% of the largest element of LARS's move, far above
    float32 rounding in another order (1e-5 of it here) and far below the smallest mistake
    (a few percent); non-finite weights never agree."""
    moved_got, moved_want = got.double() - start.double(), want.double() - start.double()
    scale = float(moved_want.abs().max()) if moved_want.numel() else 0.0
    return bool(torch.isfinite(got).all()) and bool(
        torch.allclose(moved_got, moved_want, rtol=1e-3, atol=1e-3 * scale + 1e-7)
    )


def explain(
    got: list[list[torch.Tensor]], from_defaults: frozenset[str] = frozenset()
) -> list[frozenset[str]] | None:
    """Every smallest set of at most two mistakes whose updates reproduce `got` on every layer
    and step, the settings in `from_defaults` (found by the check's probe) read from DEFAULTS,
    or None: only a set that reproduces everything is named as the cause. With settings read
    from the defaults, the empty set (that alone) is tried first. Two sets of one size can move
    the specimen identically (a layer that never moves hides its ratio): all are returned."""
    start = initial_weights()
    sizes = ([[frozenset()]] if from_defaults else []) + [
        [frozenset(c) for c in itertools.combinations(MISTAKES, n)] for n in (1, 2)
    ]
    for candidates in sizes:
        found = [
            mistakes
            for mistakes in candidates
            if all(
                _same(g, w, s)
                for step_g, step_w in zip(got, _replay(mistakes, from_defaults), strict=True)
                for g, w, s in zip(step_g, step_w, start, strict=True)
            )
        ]
        if found:
            return found
    return None


@functools.cache
def _replay(mistakes: frozenset[str], from_defaults: frozenset[str]) -> list:
    """simulate, kept: a check that names no cause replays every set of mistakes (~250)."""
    return simulate(mistakes, from_defaults)


def _same(got: torch.Tensor, want: torch.Tensor, start: torch.Tensor) -> bool:
    if not torch.isfinite(want).all():
        return not torch.isfinite(got).all()
    return close(got, want, start)
