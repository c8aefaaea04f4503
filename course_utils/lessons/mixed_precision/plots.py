"""Lesson 04's pictures: gradients against fp16's range, the GradScaler's scale over time,
and what AMP saved (time and bytes) on this device. matplotlib loads on first use."""

from __future__ import annotations

import torch

from .demo import AmpEffect, ScalerTrace


def plot_gradient_range(grads: list[torch.Tensor], scale: float, title: str = ""):
    """Histogram of log2|gradient|, unscaled and times `scale`, against fp16's limits."""
    import matplotlib.pyplot as plt

    flat = torch.cat([g.flatten() for g in grads]).abs()
    flat = flat[flat > 0].double().log2()
    fi = torch.finfo(torch.float16)
    fig, ax = plt.subplots(figsize=(7, 3.2))
    shift = torch.tensor(float(scale)).log2().item()
    ax.hist(flat.numpy(), bins=60, alpha=0.6, label="gradients")
    ax.hist((flat + shift).numpy(), bins=60, alpha=0.6, label=f"gradients x {scale:g}")
    for value, text in [
        (fi.tiny * fi.eps, "fp16 zero below"),
        (fi.tiny, "fp16 normal"),
        (fi.max, "fp16 max"),
    ]:
        ax.axvline(torch.tensor(value).log2().item(), color="k", linestyle="--", linewidth=1)
        ax.annotate(
            text,
            (torch.tensor(value).log2().item(), ax.get_ylim()[1] * 0.95),
            rotation=90,
            ha="right",
            va="top",
            fontsize=8,
        )
    ax.set(xlabel="log2 |gradient|", ylabel="count", title=title)
    ax.legend(loc="upper left")
    fig.tight_layout()
    return fig


def plot_scaler_trace(trace: ScalerTrace):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3))
    ax.step(range(len(trace.scale)), trace.scale, where="post", label="scale used")
    skipped = [i for i, s in enumerate(trace.skipped) if s]
    ax.scatter(
        skipped,
        [trace.scale[i] for i in skipped],
        color="C3",
        zorder=3,
        label="inf/NaN: step skipped, scale halved",
    )
    ax.set(xlabel="step", ylabel="loss scale", yscale="log", title="torch.amp.GradScaler")
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def plot_amp(effect: AmpEffect):
    """Step time and bytes saved for backward, fp32 against AMP."""
    import matplotlib.pyplot as plt

    from ...plots import bars

    c = effect.comparison
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.2))
    names = ("float32", f"AMP {effect.dtype}")
    bars(
        dict(zip(names, (c.baseline.median * 1e3, c.candidate.median * 1e3), strict=True)),
        ylabel="ms per step",
        title=f"training step ({effect.device_class})",
        ax=left,
    )
    bars(
        dict(zip(names, (effect.fp32_bytes / 2**20, effect.amp_bytes / 2**20), strict=True)),
        ylabel="MiB saved for backward",
        title="activation memory",
        ax=right,
    )
    fig.tight_layout()
    return fig
