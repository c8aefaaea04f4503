"""What a check says: its parts (`correct`, `at_least`, `at_most`, `not_applicable`), each a
measured value against a threshold or a yes/no, and the CheckResult they make, as a beginner
reads it (text, HTML) and as the grader records it (`to_dict`). course_utils.checks builds
results from these and re-exports them, so lessons import them from there."""

from __future__ import annotations

import html
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from .mode import untimed_reason
from .protocol import ERROR, FAILED, NOT_APPLICABLE, NOT_ATTEMPTED, PASSED

_ICON = {PASSED: "✅", FAILED: "❌", NOT_ATTEMPTED: "✏️", ERROR: "💥", NOT_APPLICABLE: "➖"}
# a box's left border: green passed, grey not applicable, blue and dashed not attempted (an
# exercise still to write is not a failure), red failed or errored
_COLOUR = {PASSED: "#1a7f37", NOT_APPLICABLE: "#6e7781", NOT_ATTEMPTED: "#0969da"}


@dataclass
class Part:
    """One thing a check verifies: correctness, or a measured effect against a threshold."""

    name: str
    status: str  # passed, failed or not-applicable
    message: str
    value: float | None = None
    threshold: float | None = None
    unit: str = ""  # of value and threshold, as the message writes it: "x", " ms", " B"
    better: str = ""  # "higher", "lower" or "" (protocol.BETTER)


@dataclass
class CheckResult:
    """The outcome of one check: the row `course grade` writes to grades.csv."""

    check_id: str
    status: str
    points: float
    max_points: float
    device_class: str
    message: str
    hint: str = ""
    value: float | None = None
    threshold: float | None = None
    parts: list[Part] = field(default_factory=list)
    unit: str = ""  # of the main part's value and threshold (Part.unit)
    better: str = ""

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> CheckResult:
        """A result as the judge sent it (its own to_dict)."""
        parts = [Part(**p) for p in data.get("parts", [])]
        return cls(**{**data, "parts": parts})

    def _ipython_display_(self) -> None:
        """Already shown by `emit`: a check cell's return value adds nothing under IPython."""

    def text(self) -> str:
        head = (
            f"{_ICON[self.status]} Check {self.check_id}: {self.status} "
            f"({self.points:g}/{self.max_points:g} points, device class {self.device_class})"
        )
        lines = [head] + [f"   {_ICON[p.status]} {p.name}: {p.message}" for p in self.parts]
        if not self.parts:
            lines.append(f"   {self.message}")
        if self.status not in (PASSED, NOT_APPLICABLE) and self.hint:
            lines.append(f"   Hint: {self.hint}")
        return "\n".join(lines)

    def html(self) -> str:
        colour = _COLOUR.get(self.status, "#cf222e")
        line = "dashed" if self.status == NOT_ATTEMPTED else "solid"
        rows = "".join(
            f"<li>{_ICON[p.status]} <b>{html.escape(p.name)}</b>: {html.escape(p.message)}</li>"
            for p in self.parts
        )
        if not self.parts:
            rows = f"<li>{html.escape(self.message)}</li>"
        hint = (
            f"<div><i>Hint:</i> {html.escape(self.hint)}</div>"
            if self.status not in (PASSED, NOT_APPLICABLE) and self.hint
            else ""
        )
        return (
            f'<div style="border-left:4px {line} {colour};padding:4px 10px;margin:4px 0">'
            f"<b>{_ICON[self.status]} Check {html.escape(self.check_id)}: {self.status}</b> "
            f"({self.points:g}/{self.max_points:g} points, device class {self.device_class})"
            f'<ul style="margin:2px 0">{rows}</ul>{hint}</div>'
        )


def correct(
    name: str,
    ok: bool,
    message: str,
    *,
    value: float | None = None,
    threshold: float | None = None,
    unit: str = "",
    better: str = "",
) -> Part:
    """A correctness part: passes when `ok`. `unit` and `better` say, in the feedback table,
    what the value and threshold are (e.g. unit=" s"; better="lower" for an error)."""
    return Part(name, PASSED if ok else FAILED, message, value, threshold, unit, better)


def at_least(
    name: str,
    value: float,
    threshold: float,
    what: str,
    *,
    unit: str = "x",
    applies: bool = True,
    reason: str = "",
) -> Part:
    """A measured effect that must reach `threshold`, or not-applicable (with the reason) on a
    device that cannot show it, or where no timing is graded (`untimed_reason`); the measured
    value is reported either way. Every effect a check demands this way is a speed-up."""
    measured = f"{what}: measured {value:.3g}{unit}"
    if applies and untimed_reason():
        applies, reason = False, untimed_reason()
    if not applies:
        return Part(
            name,
            NOT_APPLICABLE,
            f"{measured}; not graded here: {reason}",
            value,
            threshold,
            unit,
            "higher",
        )
    ok = value >= threshold
    verdict = "at least" if ok else "below"
    return Part(
        name,
        PASSED if ok else FAILED,
        f"{measured}, {verdict} the {threshold:.3g}{unit} expected",
        value,
        threshold,
        unit,
        "higher",
    )


def at_most(
    name: str, value: float, threshold: float, what: str, *, unit: str = "", timed: bool = False
) -> Part:
    """A measured quantity that must not exceed `threshold` (memory, error, steps). `timed`:
    it is a time or a ratio of times, not graded where no timing is (`untimed_reason`)."""
    if timed and untimed_reason():
        message = f"{what}: measured {value:.4g}{unit}; not graded here: {untimed_reason()}"
        return Part(name, NOT_APPLICABLE, message, value, threshold, unit, "lower")
    ok = value <= threshold
    verdict = "within" if ok else "above"
    return Part(
        name,
        PASSED if ok else FAILED,
        f"{what}: measured {value:.4g}{unit}, {verdict} the {threshold:.4g}{unit} allowed",
        value,
        threshold,
        unit,
        "lower",
    )


def not_applicable(name: str, reason: str) -> Part:
    return Part(name, NOT_APPLICABLE, reason)


def retry_measure(
    measure: Callable[[], float], ok: Callable[[float], bool], attempts: int = 3
) -> float:
    """Measure up to `attempts` times, stopping at the first value that passes.

    A loaded machine can slow one measurement of a correct solution; it cannot make a wrong
    one pass, since every attempt must clear the same threshold on its own.
    """
    value = measure()
    for _ in range(attempts - 1):
        if ok(value):
            break
        value = measure()
    return value
