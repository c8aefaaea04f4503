"""From solution notebooks to learner notebooks: find check cells, strip solutions, validate.

`solutions/` is the single source. A learner copy is made by an ordered list of small
transformations of one shape (`nb, name -> nb`), so the order is explicit and testable.
Markers follow nbgrader: `### BEGIN SOLUTION` / `### END SOLUTION` inside code cells, and
check cells carry `nbgrader: {grade: true, locked: true, grade_id, points}` plus a comment
marker on their first line, which survives editors that drop metadata (Colab).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path

import nbformat

from .errors import AuthoringError
from .protocol import BEGIN, CHECK_MARKER, END, ID_PATTERN, STUB

NB_VERSION = 4


def read(path: Path | str) -> nbformat.NotebookNode:
    return nbformat.read(str(path), as_version=NB_VERSION)


def write(nb: nbformat.NotebookNode, path: Path | str) -> None:
    Path(path).write_text(dumps(nb), encoding="utf-8")


def dumps(nb: nbformat.NotebookNode) -> str:
    return nbformat.writes(nb) + "\n"


def check_marker_line(grade_id: str, points: float) -> str:
    unit = "point" if points == 1 else "points"
    return f"# [course-check] {grade_id} ({points:g} {unit}): locked, `course grade` restores this cell"


def check_id_of(cell) -> str | None:
    """The check id a cell claims, by nbgrader metadata or by the comment marker."""
    if cell.cell_type != "code":
        return None
    meta = cell.metadata.get("nbgrader", {})
    if meta.get("grade") and meta.get("grade_id"):
        return meta["grade_id"]
    match = CHECK_MARKER.search(cell.source)
    return match["id"] if match else None


def is_check_cell(cell) -> bool:
    return cell.cell_type == "code" and (
        bool(cell.metadata.get("nbgrader", {}).get("grade"))
        or bool(CHECK_MARKER.search(cell.source))
    )


def has_solution(cell) -> bool:
    return cell.cell_type == "code" and BEGIN in cell.source


def check_cells(nb, name: str = "notebook") -> dict[str, tuple[int, object]]:
    """grade_id -> (cell index, cell) for a solution notebook, validating as it goes."""
    found: dict[str, tuple[int, object]] = {}
    for i, cell in enumerate(nb.cells):
        if not is_check_cell(cell):
            continue
        grade_id = check_id_of(cell)
        if not grade_id:
            raise AuthoringError(name, i, "check cell has no grade_id (metadata nbgrader.grade_id)")
        if not ID_PATTERN.match(grade_id):
            raise AuthoringError(
                name, i, f"grade_id {grade_id!r} may hold only letters, digits, '-' and '_'"
            )
        if grade_id in found:
            raise AuthoringError(
                name, i, f"duplicate check id {grade_id!r} (also cell {found[grade_id][0]})"
            )
        if has_solution(cell):
            raise AuthoringError(name, i, f"check cell {grade_id!r} contains a solution region")
        found[grade_id] = (i, cell)
    return found


def strip_solution(source: str, name: str = "notebook", index: int | None = None) -> str:
    """Replace each BEGIN/END SOLUTION region by the stub, at the BEGIN line's indentation."""
    out, inside = [], False
    for line in source.splitlines():
        stripped = line.strip()
        if stripped == BEGIN:
            if inside:
                raise AuthoringError(name, index, f"nested '{BEGIN}'")
            inside = True
            indent = line[: len(line) - len(line.lstrip())]
            out += [indent + s for s in STUB]
        elif stripped == END:
            if not inside:
                raise AuthoringError(name, index, f"'{END}' without '{BEGIN}'")
            inside = False
        elif not inside:
            out.append(line)
    if inside:
        raise AuthoringError(name, index, f"'{BEGIN}' is never closed")
    return "\n".join(out)


# --- transformations: nb, name -> nb, applied in LEARNER_PIPELINE order --------------------


def validate(nb, name: str):
    """Fail loudly on malformed check cells or markers, before anything is written."""
    check_cells(nb, name)
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code" and (BEGIN in cell.source or END in cell.source):
            strip_solution(cell.source, name, i)
    return nb


def mark_cells(nb, name: str):
    """nbgrader metadata on check and solution cells, so nbgrader can import the notebooks."""
    stem = Path(name).stem
    for i, cell in enumerate(nb.cells):
        if is_check_cell(cell):
            meta = cell.metadata.setdefault("nbgrader", {})
            marker = CHECK_MARKER.search(cell.source)
            meta.update(
                grade=True,
                locked=True,
                solution=False,
                grade_id=check_id_of(cell),
                schema_version=3,
            )
            meta.setdefault("points", float(marker["points"]) if marker and marker["points"] else 1)
            cell.metadata["deletable"] = False
            cell.metadata["editable"] = False
        elif has_solution(cell):
            meta = cell.metadata.setdefault("nbgrader", {})
            meta.update(grade=False, locked=False, solution=True, schema_version=3)
            meta.setdefault("grade_id", f"{stem}-solution-{i}")
    return nb


def strip_solutions(nb, name: str):
    for i, cell in enumerate(nb.cells):
        if has_solution(cell):
            cell.source = strip_solution(cell.source, name, i)
    return nb


def clear_outputs(nb, name: str):
    """No outputs, counts or run-time metadata: learner copies carry no machine's numbers."""
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
        for key in ("execution", "papermill", "collapsed", "scrolled"):
            cell.metadata.pop(key, None)
    nb.metadata.pop("papermill", None)
    return nb


def stable_ids(nb, name: str):
    """Cell ids from the solution, else from the position: same input, same bytes."""
    stem = Path(name).stem
    for i, cell in enumerate(nb.cells):
        if not cell.get("id"):
            cell["id"] = f"{stem[:40]}-{i}"
    nb.metadata["course"] = {"lesson": stem}
    return nb


Transform = Callable[[nbformat.NotebookNode, str], nbformat.NotebookNode]
LEARNER_PIPELINE: list[Transform] = [
    validate,
    mark_cells,
    strip_solutions,
    clear_outputs,
    stable_ids,
]


# The source itself carries complete nbgrader metadata, so nbgrader can use solutions/ as its
# source notebooks (its ClearSolutions rejects a solution region without `solution: true`).
SOURCE_PIPELINE: list[Transform] = [validate, mark_cells, stable_ids]


def normalised(solution, name: str):
    nb = copy.deepcopy(solution)
    for transform in SOURCE_PIPELINE:
        nb = transform(nb, name)
    return nb


def normalise_solutions(solutions: Path | str = "solutions", *, check: bool = False) -> list[str]:
    """Give every solution notebook complete nbgrader metadata; return the names that were
    (or, with `check`, would be) rewritten. Validates every notebook before writing any."""
    paths = sorted(Path(solutions).glob("*.ipynb"))
    texts = {path: dumps(normalised(read(path), path.name)) for path in paths}
    changed = [p.name for p, text in texts.items() if p.read_text(encoding="utf-8") != text]
    if not check:
        for name in changed:
            (Path(solutions) / name).write_text(texts[Path(solutions) / name], encoding="utf-8")
    return changed


def learner_copy(solution, name: str):
    nb = copy.deepcopy(solution)
    for transform in LEARNER_PIPELINE:
        nb = transform(nb, name)
    return nb


def assign(
    solutions: Path | str = "solutions", notebooks: Path | str = "notebooks", *, check: bool = False
) -> list[str]:
    """Write learner copies of every solution notebook; return the names that were (or, with
    `check`, would be) changed. `check` writes nothing."""
    solutions, notebooks = Path(solutions), Path(notebooks)
    # every notebook is built (and so validated) before any is written
    copies = {
        path.name: dumps(learner_copy(read(path), path.name))
        for path in sorted(solutions.glob("*.ipynb"))
    }
    changed = []
    for name, text in copies.items():
        target = notebooks / name
        if not target.exists() or target.read_text(encoding="utf-8") != text:
            changed.append(name)
            if not check:
                notebooks.mkdir(parents=True, exist_ok=True)
                target.write_text(text, encoding="utf-8")
    if notebooks.exists():
        for stale in sorted(p.name for p in notebooks.glob("*.ipynb") if p.name not in copies):
            changed.append(stale)
            if not check:
                (notebooks / stale).unlink()
    return changed


# --- helpers for authors writing a notebook from a script ----------------------------------


def md(text: str):
    return nbformat.v4.new_markdown_cell(text.strip("\n"))


def code(text: str, *, tags: tuple[str, ...] = ()):
    cell = nbformat.v4.new_code_cell(text.strip("\n"))
    if tags:
        cell.metadata["tags"] = list(tags)
    return cell


def check_code(grade_id: str, points: float, text: str):
    """A locked check cell: marker line, nbgrader metadata, then the call."""
    cell = code(check_marker_line(grade_id, points) + "\n" + text.strip("\n"))
    cell.metadata["nbgrader"] = {
        "grade": True,
        "locked": True,
        "solution": False,
        "grade_id": grade_id,
        "points": points,
        "schema_version": 3,
    }
    return cell


def new_notebook(cells: list, name: str):
    """A solution notebook with deterministic cell ids, a Python 3 kernel and complete
    nbgrader metadata (as `normalise_solutions` would give it)."""
    nb = nbformat.v4.new_notebook()
    nb.cells = cells
    stem = Path(name).stem
    for i, cell in enumerate(nb.cells):
        cell["id"] = f"{stem[:40]}-{i}"
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    nb.metadata["language_info"] = {"name": "python"}
    return stable_ids(mark_cells(nb, name), name)  # validated later, by `course assign`


REPOSITORY = "https://github.com/faster-pytorch-training/course"  # as in pyproject [project.urls]


def colab_badge(name: str) -> str:
    url = f"https://colab.research.google.com/github/{REPOSITORY.split('github.com/')[1]}/blob/main/notebooks/{name}"
    return f"[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]({url})"


def parameters_cell():
    return code(
        "# Parameters (papermill can override them: `course grade --quick` sets quick=True)\n"
        "quick = None  # True: small workloads (~1 min on a laptop CPU); None: follow $COURSE_QUICK",
        tags=("parameters",),
    )


def setup_cell(lesson_module: str | None):
    """Install the harness on Colab (elsewhere it is already installed), then set up."""
    lesson = (
        f"from course_utils.lessons import {lesson_module} as lesson\n" if lesson_module else ""
    )
    return code(
        "import sys\n\n"
        'print("Setting up: PyTorch and the course harness take a few seconds to load")\n'
        'if "google.colab" in sys.modules:  # Colab: install the course harness first\n'
        "    get_ipython().run_line_magic(\n"
        f'        "pip", "install -q git+{REPOSITORY}"\n'
        "    )\n\n"
        "import course_utils as cu\n"
        f"{lesson}\n"
        "info = cu.setup(quick)"
    )
