"""What `course grade` writes for people: grades.csv, summary.csv and each learner's feedback."""

from __future__ import annotations

import csv
from dataclasses import asdict
from pathlib import Path

from ..protocol import GRADE_COLUMNS, PASSED


def _number(value, unit: str = "") -> str:
    """A measured value for the table: numbers to 4 significant digits with their unit, anything
    else as it came (a check may report a value such as "inf" read back from JSON); never an
    exception."""
    if value is None:
        return ""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{value:.4g}{unit}"
    return str(value)


def _expected(r) -> str:
    """The threshold with its direction: "≥ 1.3x (higher is better)", "≤ 0.5 ms (lower is
    better)", or the target alone."""
    if r.threshold is None:
        return ""
    sign = {"higher": "≥ ", "lower": "≤ "}.get(r.better, "")
    direction = f" ({r.better} is better)" if r.better in ("higher", "lower") else ""
    return f"{sign}{_number(r.threshold, r.unit)}{direction}"


def feedback(sub, rows: list, notes: dict[str, str]) -> str:
    """The learner's feedback file: points, a table of checks, then each check explained."""
    earned = sum(r.points for r in rows)
    possible = sum(r.max_points for r in rows)
    lesson = rows[0].notebook if rows else ""
    device = next((r.device_class for r in rows if r.device_class), "unknown")
    lines = [f"# Feedback: {sub.name}", ""]
    lines.append(
        f"Lesson **{lesson or '?'}**, graded on a `{device}` device: **{earned:g} / {possible:g} points**."
    )
    if "*" in notes:  # said of the whole notebook (submission.NOTEBOOK_NOTE)
        lines += ["", f"*Note:* {notes['*']}."]
    lines += ["", "| check | status | points | measured | expected |", "|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r.check or '(notebook)'} | {r.status} | {r.points:g}/{r.max_points:g} | {_number(r.value, r.unit)} | {_expected(r)} |"
        )
    for r in rows:
        lines += ["", f"## {r.check or 'notebook'}: {r.status}", "", *explain(r, notes)]
    return "\n".join(lines) + "\n"


def explain(r, notes: dict[str, str]) -> list[str]:
    """One check explained in Markdown: its parts (or its message), the note on a restored
    cell, and the hint unless it passed. Also each test's output on Gradescope."""
    lines = [f"- {p['name']} ({p['status']}): {p['message']}" for p in r.parts] or [r.message]
    if r.check in notes:
        lines += ["", f"*Note:* {notes[r.check]}."]
    if r.status != PASSED and r.hint:
        lines += ["", f"*Hint:* {r.hint}"]
    return lines


def write_csvs(out: Path, per_submission: list[list]) -> None:
    """grades.csv (one row per submission x check) and summary.csv (points per submission, of
    the lesson's points: a check the grading device could not judge counts 0 of its points,
    so the total never shrinks to the checks that happened to be judged)."""
    with open(out / "grades.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(list(GRADE_COLUMNS))
        for rows in per_submission:
            for r in rows:
                d = asdict(r)
                writer.writerow(["" if d[c] is None else d[c] for c in list(GRADE_COLUMNS)])
    with open(out / "summary.csv", "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["submission", "notebook", "points", "max_points", "percent"])
        for rows in per_submission:
            earned = sum(r.points for r in rows)
            possible = sum(r.max_points for r in rows)
            percent = f"{100 * earned / possible:.1f}" if possible else ""
            writer.writerow(
                [rows[0].submission, rows[0].notebook, f"{earned:g}", f"{possible:g}", percent]
            )
