"""What a reader sees of one cell's stored outputs: tool noise dropped, a check's verdict on the
reference answer replaced by a neutral line, each headline effect said with its direction, and
plots given alt text. Each step is one function `(cell, where)`; STEPS orders them.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass

import nbformat

from ..authoring import check_id_of
from ..effects import Effect
from ..protocol import EFFECT_MIME, MIME, NOT_APPLICABLE, PASSED

# C++ log lines of the profiler (Kineto) and friends, written to stderr on every run:
# "USDT:2026-12-07 08:47:10 3731:3731 SyncActivityProfilerHandler.cpp:39] profiler_start"
CPP_LOG = re.compile(
    r"^(?:[A-Z]+:\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \d+:\d+ |[IWEF]\d{4} )\S*\.(?:cpp|cc|h):\d+\]"
)
# A Python warning raised inside an installed package: its path names the machine's venv.
PACKAGE_WARNING = re.compile(r"^\S*(?:site|dist)-packages\S*\.py:\d+: \w*Warning: ")
# A printed table too wide to wrap (the profiler's): its rule lines are runs of dashes.
TABLE_RULE = re.compile(r"^-{8,}(?: +-{4,}){2,} *$", re.M)

WIDE_TAG = "course-wide-output"  # keeps its lines unwrapped, scrolling sideways (MyST-NB class)


@dataclass
class Where:
    """Where a cell sits, for the steps that need it."""

    lesson: str  # the lesson's title
    section: str = ""  # the heading above the cell
    with_solutions: bool = False  # an instructor's book: answers and verdicts shown


def filter_noise(cell, where: Where) -> None:
    """Drop progress-bar frames and tool log lines on stderr; keep everything else."""
    kept = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream" and out.get("name") == "stderr":
            if "\r" in out.get("text", ""):  # a progress bar's frames: only clutter on a page
                continue
            out["text"] = _quiet(out.get("text", ""))
            if not out["text"].strip():
                continue
        kept.append(out)
    cell["outputs"] = kept


def _quiet(text: str) -> str:
    lines, skip_echo = [], False
    for line in text.splitlines(keepends=True):
        if skip_echo and line.startswith("  "):  # the warning's source line, echoed
            skip_echo = False
            continue
        skip_echo = bool(PACKAGE_WARNING.match(line))
        if not (skip_echo or CPP_LOG.match(line)):
            lines.append(line)
    return "".join(lines)


CHECK_NOTE = (
    "Check {id}{points}: {verdict} Your answer is checked when you run this cell in the notebook."
)


def neutral_check(cell, where: Where) -> None:
    """A check cell's output judged the reference answer, and its message can name that answer
    ("you named 'aten::cumsum'"): a learner page shows one neutral line in its place."""
    check_id = check_id_of(cell)
    if check_id is None or where.with_solutions or not cell.get("outputs"):
        return
    result = next(
        (o["data"][MIME] for o in cell.get("outputs", []) if MIME in o.get("data", {})), None
    )
    status = (result or {}).get("status")
    if status == PASSED:
        verdict = "the reference answer passes this check."
    elif status == NOT_APPLICABLE:
        verdict = "its speed part does not apply on this run's device; it grades correctness."
    elif status:
        verdict = f"the reference answer did not pass in this run ({status})."
    else:
        verdict = "this run shows no result for it."
    points = (result or {}).get("max_points")
    text = CHECK_NOTE.format(
        id=check_id, points=f" ({points:g} points)" if points else "", verdict=verdict
    )
    note = f'<p class="course-check-note">{html.escape(text)}</p>'
    cell["outputs"] = [nbformat.v4.new_output("display_data", data={"text/html": note})]


def effect_headline(cell, where: Where) -> None:
    """A `cu.effect` output as a headline box that says which way the ratio points."""
    for out in cell.get("outputs", []):
        record = out.get("data", {}).get(EFFECT_MIME)
        if not record:
            continue
        e = Effect.from_dict(record)
        expected = f" Expected here: {html.escape(e.expected)}." if e.expected else ""
        out["data"]["text/html"] = (
            f'<div class="course-effect"><strong>Effect of {html.escape(e.technique)}</strong> '
            f"on {html.escape(e.metric)}: {html.escape(e.change()).replace('-&gt;', '→')}, "
            f"<strong>{html.escape(e.gain())}</strong> ({html.escape(e.spread_text())})."
            f"{expected}</div>"
        )


def mark_wide_tables(cell, where: Where) -> None:
    """A printed table keeps its columns (scrolling sideways); other text wraps on the page."""
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream" and TABLE_RULE.search(out.get("text", "")):
            tags = cell.setdefault("metadata", {}).setdefault("tags", [])
            if WIDE_TAG not in tags:
                tags.append(WIDE_TAG)
            return


def alt_text(cell, where: Where) -> None:
    """Plots get alt text that says what they are, not their file name (MyST-NB cell option)."""
    if not any("image/png" in o.get("data", {}) for o in cell.get("outputs", [])):
        return
    call = re.search(r"[\w.]*plot[\w.]*(?=\()", cell.source)
    drawn = f", drawn by {call[0]}(...)" if call else ""
    heading = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", where.section).replace("`", "")
    section = f" under “{heading.replace('*', '')}”" if heading else ""
    alt = f"Figure{section} in {where.lesson}{drawn}, from the report run"
    cell.setdefault("metadata", {}).setdefault("mystnb", {})["image"] = {"alt": alt}


# In this order: noise goes first, so a check cell whose outputs were all noise gets no note;
# the note replaces a check's outputs whole; alt text looks at the outputs that are left.
STEPS = (filter_noise, neutral_check, effect_headline, mark_wide_tables, alt_text)
