"""Prepare a submission for grading: find the lesson it answers, and put every locked check
cell back as the solution has it, tagged for the grader, with all outputs cleared."""

from __future__ import annotations

import copy

import nbformat

from ..authoring import check_cells, check_id_of, mark_cells


def lesson_for(nb, filename: str, solutions: dict[str, nbformat.NotebookNode]) -> str | None:
    """Which solution notebook a submission answers: notebook metadata, then file name,
    then the check ids its cells claim."""
    lesson = nb.metadata.get("course", {}).get("lesson")
    if lesson in solutions:
        return lesson
    for stem in sorted(solutions, key=len, reverse=True):
        if stem in filename:
            return stem
    claimed = {check_id_of(c) for c in nb.cells} - {None}
    for stem, sol in solutions.items():
        if claimed & set(check_cells(sol, stem)):
            return stem
    return None


def restore_checks(sub, sol, lesson: str) -> tuple[nbformat.NotebookNode, dict[str, str]]:
    """The submission with every locked check cell as in the solution, tagged for the grader,
    and all outputs cleared. Returns it and {check id: what was restored}."""
    nb = copy.deepcopy(sub)
    sol = mark_cells(copy.deepcopy(sol), lesson + ".ipynb")
    sol_checks = check_cells(sol, lesson)
    for cell in nb.cells:
        cell.metadata.pop("course", None)  # only the grader may tag cells
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    claimed: set[str] = set()
    for cell in nb.cells:
        cid = check_id_of(cell)
        if cid in sol_checks and cid not in claimed:
            claimed.add(cid)
            cell.metadata["course"] = {"check": cid}
        elif cid is not None:
            cell.metadata.pop("nbgrader", None)  # a duplicate or unknown claim: an ordinary cell
    notes = {}
    for cid, (index, sol_cell) in sol_checks.items():
        fresh = nbformat.v4.new_code_cell(
            sol_cell.source, metadata=copy.deepcopy(sol_cell.metadata)
        )
        fresh.metadata["course"] = {"check": cid}
        pos = next(
            (i for i, c in enumerate(nb.cells) if c.metadata.get("course", {}).get("check") == cid),
            None,
        )
        if pos is not None:
            if nb.cells[pos].source != sol_cell.source or nb.cells[pos].cell_type != "code":
                notes[cid] = (
                    "you had edited this locked check cell; it was restored and graded as written"
                )
            fresh["id"] = nb.cells[pos].get("id", fresh.get("id"))
            nb.cells[pos] = fresh
        else:
            notes[cid] = (
                "this locked check cell was missing from your notebook; it was put back and graded"
            )
            nb.cells.insert(_insert_position(nb, sol, index), fresh)
    return nb, notes


def _anchors(cell) -> set[str]:
    """What identifies a cell across copies: its nbgrader grade_id and its cell id."""
    return {a for a in (cell.metadata.get("nbgrader", {}).get("grade_id"), cell.get("id")) if a}


def _insert_position(nb, sol, sol_index: int) -> int:
    """After the submission's copy of the nearest earlier solution cell we can recognise."""
    for j in range(sol_index - 1, -1, -1):
        anchors = _anchors(sol.cells[j])
        for i, cell in enumerate(nb.cells):
            if anchors & _anchors(cell):
                return i + 1
    return len(nb.cells)
