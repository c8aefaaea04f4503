"""A notebook's headline effects: what a technique bought on this machine, for `course report`.

`cu.effect(...)` is called where a notebook measures its technique against the baseline. It
shows one line to the learner and attaches the figure, with its raw samples and provenance,
as structured output (EFFECT_MIME) that `course report` collects into one row per technique.
Ratios are baseline / improved of a quantity where less is better (seconds, bytes, steps), or
improved / baseline where `better="higher"` (samples/s), so above 1 means the technique helped
here; `gain()` says it in words ("1.84x faster", "3.44x less"), so a reader never has to guess
which way a ratio points or what it measured. `n`, the number of ratios, travels with the
figure: an IQR is claimed only where n >= 2, so a single ratio is never drawn as a certain one.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass, field, fields

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
    better: str = "lower"  # which way the metric improves: "lower" (s, bytes) or "higher"

    @classmethod
    def from_dict(cls, data: dict) -> Effect:
        """An effect as `to_dict()` wrote it (a report's results.json), derived keys ignored."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

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

    def gain(self) -> str:
        """The ratio in words that carry its direction: "1.84x faster", "3.44x less"."""
        return gain_words(self.ratio, self.unit, self.better)

    def change(self) -> str:
        """Baseline to improved in the metric's unit: "47.6 ms -> 25.6 ms"."""
        return f"{fmt_value(self.baseline, self.unit)} -> {fmt_value(self.improved, self.unit)}"

    def spread_text(self) -> str:
        q1, q3 = self.spread
        if self.n > 1:
            return f"IQR {q1:.2f}-{q3:.2f}, n={self.n} pairs"
        return "n=1: one ratio, no spread measured"

    def text(self) -> str:
        expected = f"; expected here: {self.expected}" if self.expected else ""
        return (
            f"Effect of {self.technique} on {self.metric}: {self.change()}, "
            f"{self.gain()} ({self.spread_text()}){expected}"
        )


# What "above 1" means for each unit, and its opposite: (better, worse).
_WORDS = {"s": ("faster", "slower"), "bytes": ("less", "more")}


def gain_words(ratio: float, unit: str = "s", better: str = "lower") -> str:
    """A ratio (above 1: helped) in words a reader need not decode: "1.84x faster",
    "3.44x less", and a ratio below 1 as what it cost: 0.8 is "1.25x slower"."""
    if better == "higher":
        up, down = "higher", "lower"
    else:
        up, down = _WORDS.get(unit, ("fewer", "more"))
    if ratio >= 1:
        return f"{ratio:.2f}x {up}"
    if ratio <= 0:
        return f"{ratio:.2f}x"
    return f"{1 / ratio:.2f}x {down}"


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
    better: str = "lower",
) -> Effect:
    """Record a headline effect: from a `cu.compare` Comparison (its interleaved pair ratios),
    or from a `baseline` and an `improved` figure of the same unit, with the `ratios` of the
    interleaved rounds they summarise where there were several (else one overall ratio).

    `workload` names what was timed and `check` the "<check id>/<part>" timing a related
    figure, so the report can show both numbers without leaving the reader two unexplained.
    `better="higher"` is for a metric that improves upward (samples/s): its ratios are then
    improved / baseline, so above 1 still means the technique helped."""
    from .device import env_info

    if better not in ("lower", "higher"):
        raise ValueError(f"better must be 'lower' or 'higher', not {better!r}")
    if comparison is not None:
        if better != "lower":
            raise ValueError("a Comparison times both sides: its metric is better lower")
        baseline, improved = comparison.baseline.median, comparison.candidate.median
        ratios = list(comparison.ratios)
    else:
        if baseline is None or improved is None:
            raise ValueError("give a comparison, or baseline and improved (> 0)")
        worse, good = (baseline, improved) if better == "lower" else (improved, baseline)
        if not good > 0:
            raise ValueError("give a comparison, or baseline and improved (> 0)")
        ratios = list(ratios) if ratios else [worse / good]
    result = Effect(
        technique, metric, unit, float(baseline), float(improved), ratios, expected,
        workload=workload, check=check, better=better,
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
