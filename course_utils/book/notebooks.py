"""A lesson as the book shows it: the learner copy's cells with the report run's outputs.

`course report` executes the solution notebook with papermill, which inserts an
`injected-parameters` cell; `course assign` keeps every cell id of the solution in the learner
copy and changes only the answer cells. So outputs carry over by cell id, injected cells
skipped, and a run whose other cells differ from the learner copy is another version of the
lesson, drawn bare. An answer cell shows the learner's stub and no output, unless the book is
built with solutions; a check cell shows a neutral line instead of its verdict on the reference.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from ..authoring import read
from . import outputs

SOLUTION_MARK = "### BEGIN SOLUTION"
INJECTED_TAGS = {"injected-parameters"}  # papermill's; a report run adds nothing else
HEADING = re.compile(r"^#{1,3} +(.+)$", re.M)


@dataclass
class LessonView:
    """The notebook a page renders and how it relates to the report run."""

    nb: nbformat.NotebookNode
    how: str  # "ran", "not run" or "another version"
    differs: list[str] = field(default_factory=list)  # cell ids that tell the versions apart
    title: str = ""

    @property
    def cells_with_outputs(self) -> int:
        return sum(bool(c.get("outputs")) for c in self.nb.cells if c.cell_type == "code")


def _is_injected(cell) -> bool:
    return bool(INJECTED_TAGS & set(cell.get("metadata", {}).get("tags", [])))


def _differs(nb, run) -> list[str]:
    """Cell ids where the run is not this learner copy's solution (added, gone or changed)."""
    done = {c.get("id"): c for c in run.cells if not _is_injected(c)}
    mine = [c.get("id") for c in nb.cells]
    out = [i for i in done if i not in mine] + [i for i in mine if i not in done]
    for cell in nb.cells:
        other = done.get(cell.get("id"))
        if other is None:
            continue
        if other.cell_type != cell.cell_type:
            out.append(cell.get("id"))
        elif SOLUTION_MARK not in other.source and other.source != cell.source:
            out.append(cell.get("id"))
    return out


def _bare(nb) -> None:
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None


def learner_view(
    learner: Path, executed: Path | None, *, with_solutions: bool = False
) -> LessonView:
    """The learner notebook `learner` carrying the outputs of `executed` (a report run of its
    solution), or bare when the report did not run it or ran another version of it."""
    nb = copy.deepcopy(read(learner))
    title = next(
        (
            m[1].strip()
            for c in nb.cells
            if c.cell_type == "markdown" and (m := HEADING.search(c.source))
        ),
        learner.stem,
    )
    run = read(executed) if executed is not None and executed.exists() else None
    if run is None:
        _bare(nb)
        return LessonView(nb, "not run", title=title)
    differs = _differs(nb, run)
    if differs:
        _bare(nb)
        return LessonView(nb, "another version", differs, title)
    done = {c.get("id"): c for c in run.cells if not _is_injected(c)}
    section = ""
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            section = next((m[1].strip() for m in HEADING.finditer(cell.source)), section)
            continue
        if cell.cell_type != "code":
            continue
        ran = done[cell.get("id")]
        is_answer = SOLUTION_MARK in ran.source
        if is_answer and not with_solutions:
            cell.outputs, cell.execution_count = [], None
            continue
        if is_answer:
            cell.source = ran.source
        cell.outputs = copy.deepcopy(ran.get("outputs", []))
        cell.execution_count = ran.get("execution_count")
        where = outputs.Where(title, section, with_solutions)
        for step in outputs.STEPS:
            step(cell, where)
    return LessonView(nb, "ran", title=title)


def write(nb, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(path))
