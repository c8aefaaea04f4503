"""Matplotlib helpers: the few pictures the lessons keep drawing.

matplotlib is imported where it is used, so DataLoader workers that import course_utils
do not pay for it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .effects import fmt_spread


def bars(
    values: Mapping[str, float], *, ylabel: str, title: str = "", fmt: str = "{:.3g}", ax=None
):
    """One bar per variant, each labelled with its value (times, memory, throughput)."""
    import matplotlib.pyplot as plt

    ax = ax or plt.subplots(figsize=(6, 3.2))[1]
    names, heights = list(values), list(values.values())
    drawn = ax.bar(names, heights, color=[f"C{i}" for i in range(len(names))])
    ax.bar_label(drawn, labels=[fmt.format(h) for h in heights], padding=2)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.margins(y=0.15)
    return ax


def lines(
    series: Mapping[str, tuple[Sequence[float], Sequence[float]]],
    *,
    xlabel: str,
    ylabel: str,
    title: str = "",
    logx: bool = False,
    logy: bool = False,
    marker: str = "o",
    ax=None,
):
    """Several (x, y) series on one axis: sweeps, training curves, schedules."""
    import matplotlib.pyplot as plt

    ax = ax or plt.subplots(figsize=(6, 3.5))[1]
    for name, (x, y) in series.items():
        ax.plot(x, y, marker=marker, markersize=3, label=name)
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    if len(series) > 1:
        ax.legend()
    ax.grid(alpha=0.3)
    return ax


def training_curves(
    histories: Mapping[str, object], *, target: float | None = None, title: str = ""
):
    """Loss per step and accuracy per evaluation for several runs (course_utils.train.History)."""
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.5))
    for name, h in histories.items():
        left.plot(h.step, h.loss, label=name, alpha=0.8)
        right.plot(h.eval_step, h.accuracy, marker="o", markersize=3, label=name)
    left.set(xlabel="step", ylabel="training loss", title=title or "loss")
    right.set(xlabel="step", ylabel="test accuracy", title="accuracy")
    if target is not None:
        right.axhline(target, color="grey", linestyle="--", label=f"target {target:.0%}")
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    return fig


def schedule(
    lrs: Sequence[float],
    *,
    momentum: Sequence[float] | None = None,
    title: str = "learning-rate schedule",
):
    """Learning rate (and momentum, if given) per optimizer step."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.2))
    ax.plot(lrs, color="C0")
    ax.set(xlabel="optimizer step", ylabel="learning rate", title=title)
    if momentum is not None:
        twin = ax.twinx()
        twin.plot(momentum, color="C1", linestyle="--")
        twin.set_ylabel("momentum / beta1", color="C1")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def effect_bars(
    labels: Sequence[str],
    ratios: Sequence[float],
    iqrs: Sequence[tuple[float, float] | None],
    ns: Sequence[int],
    shown: Sequence[bool],
    *,
    title: str,
):
    """One horizontal bar per effect (baseline / improved, log scale), each labelled with its
    n. Whiskers only where an IQR was measured (n >= 2): a single ratio drawn with a
    zero-width bar would claim a certainty nobody measured. Effects the device could not show
    are grey and hatched, and say so."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 0.5 * len(labels) + 1.5))
    colours = [
        ("C2" if r >= 1 else "C3") if ok else "0.75" for r, ok in zip(ratios, shown, strict=True)
    ]
    drawn = ax.barh(labels, ratios, color=colours)
    for bar, ok in zip(drawn, shown, strict=True):
        bar.set_hatch("" if ok else "//")
    for y, (r, q, n, ok) in enumerate(zip(ratios, iqrs, ns, shown, strict=True)):
        if q is not None:
            whisker = [[max(0.0, r - q[0])], [max(0.0, q[1] - r)]]
            ax.errorbar(r, y, xerr=whisker, color="black", capsize=3)
        words = f"{r:.2f}x, {fmt_spread(n, q)}"
        words += "" if ok else ", not shown on this device"
        end = max(r, q[1]) if q else r  # after the whisker, so it never hides the text
        ax.text(end * 1.06, y, words, va="center", fontsize=8)
    ax.axvline(1.0, color="grey", linestyle="--")
    ax.set_xscale("log")
    ax.set_xlim(right=max([*ratios, 1.0]) * 6)  # room for the labels on a log axis
    ax.invert_yaxis()
    ax.set(xlabel="baseline / improved (above 1: helped here)", title=title)
    fig.tight_layout()
    return fig
