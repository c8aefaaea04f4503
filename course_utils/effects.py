"""A notebook's headline effects: what a technique bought on this machine, for `course report`.

`cu.effect(...)` is called where a notebook measures its technique against the baseline. It
shows one line to the learner and attaches the figure, with its raw samples and provenance,
as structured output (EFFECT_MIME) that `course report` collects into one row per technique.
Ratios are baseline / improved of a quantity where less is better (seconds, bytes, steps), so
above 1 means the technique helped here. `n`, the number of ratios, travels with the figure:
an IQR is claimed only where n >= 2, so a single ratio is never drawn as a certain one.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field

from .protocol import EFFECT_MIME


@dataclass
class Effect:
    """One technique against its baseline, measured on this machine."""

    technique: str
    metric: str  # what was measured: "time per training step", "activation memory", ...
    unit: str  # of baseline and improved: "s", "bytes", "steps"
    baseline: float
    improved: float
    ratios: list[float]  # baseline / improved: one per interleaved pair, or one overall
    expected: str = ""  # what this device class can show, in words
    env: dict = field(default_factory=dict)
    workload: str = ""  # what was timed, so a reader can tell it from a check's workload
    check: str = ""  # "<check id>/<part name>" that measures a related figure, if one does

    @property
    def n(self) -> int:
        """How many ratios the effect rests on: 1 means no spread was measured."""
        return len(self.ratios)

    @property
    def ratio(self) -> float:
        return statistics.median(self.ratios)

    @property
    def spread(self) -> tuple[float, float]:
        """The interquartile range of the pair ratios (both ends equal for one ratio: an
        IQR of nothing; readers must look at `n` before drawing it)."""
        if self.n < 2:
            return self.ratio, self.ratio
        q1, _, q3 = statistics.quantiles(self.ratios, n=4, method="inclusive")
        return q1, q3

    def to_dict(self) -> dict:
        return {**asdict(self), "ratio": self.ratio, "spread": list(self.spread), "n": self.n}

    def text(self) -> str:
        q1, q3 = self.spread
        spread = (
            f" (IQR {q1:.2f}-{q3:.2f}, n={self.n} pairs)"
            if self.n > 1
            else " (n=1: one ratio, no spread measured)"
        )
        expected = f"; expected here: {self.expected}" if self.expected else ""
        before, after = fmt_value(self.baseline, self.unit), fmt_value(self.improved, self.unit)
        return (
            f"Effect of {self.technique} on {self.metric}: {before} -> {after}, "
            f"{self.ratio:.2f}x{spread}{expected}"
        )


def fmt_value(value: float | None, unit: str = "") -> str:
    """A figure in the unit a reader thinks in: ms below a second, MiB for bytes."""
    if value is None:
        return ""
    if unit == "s":
        return f"{value:.3g} s" if value >= 1 else f"{value * 1e3:.3g} ms"
    if unit == "bytes":
        return f"{value / 2**20:.3g} MiB"
    return f"{value:.4g} {unit}".strip()


def fmt_spread(n: int, spread) -> str:
    """What a ratio rests on: "IQR 1.90-2.10, n=5", or "n=1, no IQR" where there is one ratio,
    whose spread was never measured (`spread` is then ignored)."""
    return f"IQR {spread[0]:.2f}-{spread[1]:.2f}, n={n}" if n >= 2 else f"n={n}, no IQR"


def effect(
    technique: str,
    comparison=None,
    *,
    metric: str = "time per training step",
    baseline: float | None = None,
    improved: float | None = None,
    ratios: list[float] | None = None,
    unit: str = "s",
    expected: str = "",
    workload: str = "",
    check: str = "",
    show: bool = True,
) -> Effect:
    """Record a headline effect: from a `cu.compare` Comparison (its interleaved pair ratios),
    or from a `baseline` and an `improved` figure of the same unit, with the `ratios` of the
    interleaved rounds they summarise where there were several (else one overall ratio).

    `workload` names what was timed and `check` the "<check id>/<part>" timing a related
    figure, so the report can show both numbers without leaving the reader two unexplained."""
    from .device import env_info

    if comparison is not None:
        baseline, improved = comparison.baseline.median, comparison.candidate.median
        ratios = list(comparison.ratios)
    elif baseline is not None and improved is not None and improved > 0:
        ratios = list(ratios) if ratios else [baseline / improved]
    else:
        raise ValueError("give a comparison, or baseline and improved (> 0)")
    result = Effect(
        technique, metric, unit, float(baseline), float(improved), ratios, expected,
        workload=workload, check=check,
    )  # fmt: skip
    result.env = env_info()
    if show:
        _display(result)
    return result


def _display(result: Effect) -> None:
    try:
        from IPython import get_ipython
        from IPython.display import display

        if get_ipython() is not None:
            display({EFFECT_MIME: result.to_dict(), "text/plain": result.text()}, raw=True)
            return
    except ImportError:
        pass
    print(result.text())
