"""A lesson as the book shows it: the learner copy's cells with the report run's outputs.

`course report` executes the solution notebook; cell i of the learner copy is cell i of the
solution with each answer replaced (`course assign`), so outputs carry over by position. An
answer cell shows the learner's stub and no output, unless the book is built with solutions.
"""

from __future__ import annotations

import copy
from pathlib import Path

import nbformat

from ..authoring import read

SOLUTION_MARK = "### BEGIN SOLUTION"


def learner_view(learner: Path, executed: Path | None, *, with_solutions: bool = False):
    """The learner notebook `learner` carrying the outputs of `executed` (a report run of its
    solution), or bare when the report did not run it or ran another version of it.
    Returns (notebook, how): how is "ran", "not run" or "another version"."""
    nb = copy.deepcopy(read(learner))
    run = read(executed) if executed is not None and executed.exists() else None
    if run is None or len(run.cells) != len(nb.cells):
        for cell in nb.cells:
            if cell.cell_type == "code":
                cell.outputs, cell.execution_count = [], None
        return nb, "not run" if run is None else "another version"
    for mine, done in zip(nb.cells, run.cells, strict=True):
        if mine.cell_type != "code":
            continue
        is_answer = SOLUTION_MARK in done.source
        if is_answer and not with_solutions:
            mine.outputs, mine.execution_count = [], None
            continue
        if is_answer:
            mine.source = done.source
        mine.outputs = [o for o in done.get("outputs", []) if not _is_stream_noise(o)]
        mine.execution_count = done.get("execution_count")
    return nb, "ran"


def _is_stream_noise(output) -> bool:
    """Progress bars' carriage-return frames on stderr: a rendered page shows only clutter."""
    return (
        output.get("output_type") == "stream"
        and output.get("name") == "stderr"
        and ("\r" in output.get("text", ""))
    )


def write(nb, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(path))
