"""Lesson 09's picture: interleaved pair ratios as dots, one row per comparison, with the
middle half of each row shaded, so a reader sees the spread a verdict must respect.
matplotlib loads on first use."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence


def plot_pair_ratios(rows: Mapping[str, Sequence[float]], title: str = ""):
    """One row of dots per comparison (baseline time / candidate time of each pair), its
    interquartile range as a band, and the line of no effect at 1."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 0.9 + 1.15 * len(rows)))
    for row, ratios in enumerate(rows.values()):
        ax.scatter(ratios, [row] * len(ratios), alpha=0.6, color=f"C{row}")
        q1, _, q3 = statistics.quantiles(ratios, n=4, method="inclusive")
        ax.hlines(row, q1, q3, linewidth=6, alpha=0.3, color=f"C{row}")  # the middle half
    ax.set_yticks(range(len(rows)), list(rows))
    ax.set_ylim(-0.6, len(rows) - 0.4)
    ax.axvline(1, color="grey", linestyle="--")
    ax.set(xlabel="pair ratio (baseline time / candidate time)", title=title)
    fig.tight_layout()
    return fig
