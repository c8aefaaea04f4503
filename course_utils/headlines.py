"""What each headline effect of `course report` rests on, and what a check said beside it.

A notebook's headline effect (course_utils.effects) and its checks time different workloads,
in different runs: the demo's own measurement against the check's, often of the learner's
code. Shown bare, the two numbers disagree for no stated reason. So each row names the
effect's workload and its n (an IQR only where n >= 2), and shows the figure of the check
part that measured a related workload, labelled as the check's: the workload and the part
are the ones the notebook named in `cu.effect(workload=..., check=...)`. Where that part was not
applicable here (no native bf16, a busy CPU), the effect is marked "not shown on this
device", with the check's reason: a number the device could not demonstrate is not a speed-up.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .effects import fmt_spread, fmt_value
from .protocol import FAILED, NOT_APPLICABLE, PASSED

if TYPE_CHECKING:  # report imports this module to write its pages
    from .report import NotebookRun

MEANING = (
    "Effect = baseline / improved of a quantity where less is better (time, memory), measured "
    "on the workload named in its row: above 1 the technique helped on this machine. n is how "
    "many ratios it rests on: for n >= 2, the median of n baseline/improved ratios (for times, "
    "interleaved pairs; the workload says when they are one per rank or per seed), their IQR "
    "in brackets; for n = 1, one ratio of a baseline and an improved figure, with no "
    "spread measured (no IQR, no error bar). Where a check of the same notebook measured a "
    "related workload, its figure is shown beside, labelled as the check's; where that check "
    "found the effect not applicable here, the effect is marked not shown on this device."
)


@dataclass(frozen=True)
class CheckFigure:
    """One part of a check, in the check's own words: what it measured and what it found."""

    check: str
    part: str
    status: str  # the part's
    value: str  # as the check printed it ("1.73x", "385 KiB"), or ""
    what: str  # what the part measured, from its message
    reason: str  # why it was not applicable or not timed, from its message
    check_failed: bool  # then a not-applicable part says "fix your code first", not "this device"

    @property
    def not_shown_here(self) -> bool:
        """The check found the effect could not show on this device (not a learner's bug)."""
        return self.status == NOT_APPLICABLE and not self.check_failed


def check_figure(checks: list[dict], ref: str) -> CheckFigure | None:
    """The part `ref` ("<check id>/<part name>") among a run's checks, if it was recorded."""
    check_id, _, part_name = ref.partition("/")
    check = next((c for c in checks if c.get("check") == check_id), None)
    part = next((p for p in (check or {}).get("parts", []) if p.get("name") == part_name), None)
    if check is None or part is None:
        return None
    message = str(part.get("message", ""))
    what, measured, rest = message.partition(": measured ")
    value = re.match(r"[^,;]+", rest) if measured else None
    reason = rest.partition("; not graded here: ")[2] if measured else message
    return CheckFigure(
        check_id,
        part_name,
        str(part.get("status", "")),
        value.group(0).strip() if value else "",
        what if measured else "",
        reason if part.get("status") == NOT_APPLICABLE else "",
        check.get("status") == FAILED,
    )


@dataclass(frozen=True)
class Headline:
    """One headline effect as the report shows it: the figure, what it rests on, and the
    related check figure of its notebook."""

    notebook: str
    effect: dict  # Effect.to_dict(), as the notebook recorded it
    workload: str
    check: CheckFigure | None
    check_ref: str = ""  # "<check id>/<part>" that times a related figure, found or not

    @property
    def n(self) -> int:
        return len(self.effect["ratios"])

    @property
    def ratio(self) -> float:
        return float(self.effect["ratio"])

    @property
    def iqr(self) -> tuple[float, float] | None:
        """The IQR of the pair ratios; None for one ratio, whose spread was never measured."""
        return tuple(self.effect["spread"]) if self.n >= 2 else None

    @property
    def shown(self) -> bool:
        return self.check is None or not self.check.not_shown_here


def headlines(notebook: str, effects: list[dict], checks: list[dict]) -> list[Headline]:
    """A notebook's effects, each with the workload and related check its `cu.effect` named."""
    rows = []
    for e in effects:
        ref = e.get("check", "")
        figure = check_figure(checks, ref) if ref else None
        rows.append(Headline(notebook, e, e.get("workload", ""), figure, ref))
    return rows


def effect_text(h: Headline) -> str:
    """The ratio with what it rests on (IQR and n, or n=1 and no IQR), and whether this
    device showed it."""
    text = f"{h.ratio:.2f}x ({fmt_spread(h.n, h.effect['spread'])})"
    return text if h.shown else f"{text}, not shown on this device"


def check_text(h: Headline) -> str:
    """The related check figure, labelled as the check's; empty where no check measures one."""
    c = h.check
    if c is None:
        return f"not in these results: check {h.check_ref}" if h.check_ref else ""
    label = f"check {c.check} ({c.part})"
    if c.status != NOT_APPLICABLE:
        return f"{c.value or 'no value'} by {label}, {c.status}"
    measured = f" (it measured {c.value})" if c.value else ""
    where = "not applicable on this device" if c.not_shown_here else "not timed"
    return f"{where}, says {label}: {c.reason}{measured}"


def note(h: Headline) -> str:
    """One sentence setting the effect's workload beside the check's, for the notes."""
    workload = h.workload or "a workload its notebook does not name"
    timed = f"{h.notebook}: the effect ({h.ratio:.2f}x, n={h.n}) timed {workload}"
    c = h.check
    if c is None and h.check_ref:
        return (
            f"{timed}; check {h.check_ref} times a related figure, but these results do not "
            "hold it (the check stopped before it, or the run predates kept check parts)."
        )
    if c is None:
        return timed + "; no check of this notebook times a related figure."
    if c.not_shown_here:
        return f"{timed}; check {c.check} ({c.part}) found it cannot show here: {c.reason}."
    if c.status == NOT_APPLICABLE:
        return f"{timed}; check {c.check} ({c.part}) did not time it: {c.reason}."
    what = c.what or c.part
    return f"{timed}; check {c.check} ({c.part}), in its own run, measured {what}: {c.value}."


def technique_rows(runs: Mapping[str, NotebookRun]) -> list[dict]:
    """One row per headline effect; a notebook that recorded none says so in its own row."""
    rows = []
    for name, run in runs.items():
        good = sum(c["status"] in (PASSED, NOT_APPLICABLE) for c in run.checks)
        status = f"{good}/{len(run.checks)} checks ok" + (
            "" if run.outcome == "completed" else f" ({run.outcome})"
        )
        base = dict.fromkeys(COLUMNS, "")
        base.update(notebook=name, status=status, runtime=f"{run.seconds:.0f} s")
        found = headlines(name, run.effects, run.checks)
        if not found:
            rows.append({**base, "technique": "no headline effect"})
        for h in found:
            e = h.effect
            rows.append(
                {
                    **base,
                    "technique": e["technique"],
                    "workload": h.workload or "not named by its notebook",
                    "metric": e["metric"],
                    "baseline": fmt_value(e["baseline"], e["unit"]),
                    "improved": fmt_value(e["improved"], e["unit"]),
                    "effect": effect_text(h),
                    "check's figure": check_text(h),
                    "expected": e.get("expected", ""),
                }
            )
    return rows


COLUMNS = (
    "notebook",
    "technique",
    "workload",
    "metric",
    "baseline",
    "improved",
    "effect",
    "check's figure",
    "expected",
    "status",
    "runtime",
)
