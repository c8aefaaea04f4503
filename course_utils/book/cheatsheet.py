"""The cheat sheet: every technique the course teaches as a card, by lesson: the guide's tip, the
one line of code, when it pays and on which device classes, what it costs, and what the runs
measured, with metric and direction. Cards, not a table: they read on a phone as at 1280 px."""

from __future__ import annotations

from .. import guide
from ..guide import GUIDE_TIPS
from ..techniques import ALL_CLASSES, TECHNIQUES, Technique
from .results import measured, run_name
from .runs import Run, figure, repo_link

INTRO = f"""\
# Cheat sheet

Every technique the course teaches, by lesson. *Tip* is the tip number of Kuhn's
[{guide.TITLE}]({guide.URL}). *Measured* is the
lesson's headline effect on that technique, read from the runs (this book's run and those
committed in `docs/results`), each with its metric, its direction and the file it comes from.
"""


def _measured(t: Technique, runs: list[Run]) -> str:
    if not t.effect:
        return "no headline effect: the lesson's checks grade it"
    found = measured(t, runs)
    if not found:
        return "not measured on these devices"
    said = []
    for run, e in found:
        source = repo_link(run.source) if run.source else run_name(run)
        said.append(f"{e.metric}, {figure(e)} on {run.device}, {run.date} ({source})")
    return "; ".join(said)


def card(t: Technique, runs: list[Run]) -> list[str]:
    tip = f" (guide tip {t.tip}: *{GUIDE_TIPS[t.tip]}*)" if t.tip else ""
    classes = (
        "every device class"
        if set(t.classes) == set(ALL_CLASSES)
        else ", ".join(f"`{c}`" for c in t.classes)
    )
    lines = [
        ":::{container} cheat-card",
        f"**{t.name}**{tip}",
        "",
        "```python",
        t.code,
        "```",
        "",
        f"**Pays:** {t.pays}; on {classes}.",
        "",
    ]
    if t.cost:
        lines += [f"**Costs:** {t.cost}.", ""]
    return [*lines, f"**Measured:** {_measured(t, runs)}.", ":::", ""]


def cheat_sheet(titles: dict[str, str], runs: list[Run]) -> str:
    """`titles`: the lessons in the book, in reading order, with their titles."""
    lines = [INTRO]
    for stem, title in titles.items():
        rows = [t for t in TECHNIQUES if t.lesson == stem]
        if not rows:
            continue
        lines += [f"## [{title}]({stem}.ipynb)", ""]
        for t in rows:
            lines += card(t, runs)
    return "\n".join(lines)
