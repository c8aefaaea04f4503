"""Run a learner copy the way a learner does, and say what they would have seen.

A learner opens `notebooks/NN_*.ipynb` in JupyterLab or Colab, sets no parameter and presses
Run All; the auto mode picks quick or full. This runs the same notebook in a kernel whose
environment has no test runner in it (no $PYTEST_VERSION: a not-attempted check then shows
its verdict and the run goes on, as in JupyterLab) and no $COURSE_QUICK, and records per cell
how long it ran, how long until its first output (a silent cell looks hung), its error, the
check verdicts it showed and which demos fell back to a reference answer.

Used by tests/test_learner_path.py (untouched and half-solved copies of every notebook) and
scripts/learner_path.py (the table of mode chosen, estimate and measured seconds).
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import nbformat

from .answers import USES_REFERENCE
from .authoring import check_id_of, has_solution, learner_copy
from .grading.demos import is_demo
from .protocol import CHECK_MARKER, MIME

# What a test runner or the caller's own mode choice would leak into the learner's kernel.
NOT_A_LEARNERS = ("PYTEST_VERSION", "PYTEST_CURRENT_TEST", "COURSE_QUICK", "COURSE_STRICT_CHECKS")
_REFERENCE_NOTICE = re.compile(r"\((\w+) [^()]*: " + re.escape(USES_REFERENCE) + r"\.\)")
_BAR = re.compile(r"(\d+)/(\d+) \[")


@dataclass
class CellRun:
    """One code cell as the learner saw it run."""

    index: int
    kind: str  # "check", "exercise", "demo" or "code"
    seconds: float
    first_output_s: float | None  # None: the cell printed nothing
    error: str = ""  # the exception's name, "" if none
    verdicts: dict[str, str] = field(default_factory=dict)  # check id -> status shown
    reference_for: list[str] = field(default_factory=list)  # answers a demo replaced
    stale_bars: list[str] = field(default_factory=list)  # progress bars left unfinished


@dataclass
class LearnerRun:
    """A whole Run All: which mode the notebook chose, and every code cell."""

    notebook: str
    mode_line: str  # the setup cell's "quick mode: ..." line
    seconds: float
    cells: list[CellRun]
    finished: bool = True  # False: stopped at the deadline, so `seconds` is a lower bound

    @property
    def errors(self) -> list[CellRun]:
        return [c for c in self.cells if c.error]

    @property
    def quick(self) -> bool | None:
        if ": on" in self.mode_line:
            return True
        return False if ": off" in self.mode_line else None

    def to_dict(self) -> dict:
        return {**asdict(self), "quick": self.quick}


def learner_env(**extra: str) -> dict[str, str]:
    """This process's environment without what a learner's kernel would not have."""
    env = {k: v for k, v in os.environ.items() if k not in NOT_A_LEARNERS}
    env.setdefault("COURSE_DATASET", "offline")  # CIFAR-10 cannot be downloaded here
    return {**env, **extra}


def exercises_by_check(solution) -> list[tuple[str, list[int]]]:
    """[(check id, the exercise cells it grades)] in order: the exercise cells since the last
    check cell; a second check of the same exercise grades the same cells."""
    groups: list[tuple[str, list[int]]] = []
    pending: list[int] = []
    for i, cell in enumerate(solution.cells):
        if has_solution(cell):
            pending.append(i)
        elif check_id_of(cell):
            groups.append((check_id_of(cell), pending or (groups[-1][1] if groups else [])))
            pending = []
    return groups


def half_solved(solution, name: str, every: int = 2):
    """The learner copy of `solution` with the exercises of every `every`-th check solved,
    from the first: a learner part way through, whose demos mix their answers and the
    references. Returns the notebook and the ids of the checks whose exercises are solved."""
    nb = learner_copy(solution, name)
    solved = set()
    for n, (check_id, cells) in enumerate(exercises_by_check(solution)):
        if n % every == 0:
            solved.add(check_id)
            for i in cells:
                nb.cells[i].source = solution.cells[i].source
    return nb, solved


def kind_of(cell) -> str:
    if CHECK_MARKER.search(cell.source):
        return "check"
    if cell.metadata.get("nbgrader", {}).get("solution"):
        return "exercise"
    return "demo" if is_demo(cell) else "code"


def _stale_bars(text: str) -> list[str]:
    """Progress bars whose last drawn state (after the last carriage return) is not n/n."""
    stale = []
    for line in text.replace("\r\n", "\n").split("\n"):
        shown = line.split("\r")[-1] if "\r" in line else line
        for done, total in _BAR.findall(shown):
            if int(done) < int(total):
                stale.append(shown.strip()[:120])
    return stale


def summarise(index: int, cell, seconds: float, first_output_s: float | None) -> CellRun:
    run = CellRun(index, kind_of(cell), seconds, first_output_s)
    for out in cell.get("outputs", []):
        if out.output_type == "error":
            run.error = out.ename
        elif out.output_type == "stream":
            run.reference_for += _REFERENCE_NOTICE.findall(out.text)
            if out.name == "stderr":
                run.stale_bars += _stale_bars(out.text)
        elif MIME in out.get("data", {}):
            result = out.data[MIME]
            run.verdicts[result["check_id"]] = result["status"]
    return run


def _mode_line(nb) -> str:
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            for line in out.get("text", "").splitlines():
                if line.strip().startswith("quick mode:"):
                    return line.strip()
    return ""


def run(
    nb,
    *,
    workdir: Path,
    name: str = "",
    cell_timeout: float = 900,
    deadline_s: float | None = None,
    **env: str,
) -> LearnerRun:
    """Run All on `nb` in `workdir` as a learner would; `env` adds variables (COURSE_QUICK to
    force a mode). With `deadline_s` the run stops there and says it did not finish."""
    from nbclient import NotebookClient
    from nbclient.exceptions import CellTimeoutError

    started: dict[int, float] = {}
    first: dict[int, float] = {}
    ended: dict[int, float] = {}

    class Client(NotebookClient):
        def output(self, outs, msg, display_id, cell_index):
            first.setdefault(cell_index, time.monotonic())
            return super().output(outs, msg, display_id, cell_index)

    client = Client(
        nb,
        timeout=cell_timeout,
        allow_errors=True,  # to see every cell; Run All stops at the first error, so the
        kernel_name="python3",  # tests require none outside the check cells
        timeout_func=lambda cell: _remaining(t0, cell_timeout, deadline_s),
        on_cell_execute=lambda cell, cell_index: started.__setitem__(cell_index, time.monotonic()),
        on_cell_executed=lambda cell, cell_index, execute_reply: ended.__setitem__(
            cell_index, time.monotonic()
        ),
    )
    t0 = time.monotonic()
    finished = True
    try:
        client.execute(cwd=str(workdir), env=learner_env(**env))
    except CellTimeoutError:
        if deadline_s is None:
            raise
        finished = False
    seconds = time.monotonic() - t0
    cells = [
        summarise(
            i,
            cell,
            ended.get(i, t0) - started.get(i, t0),
            first[i] - started[i] if i in first and i in started else None,
        )
        for i, cell in enumerate(nb.cells)
        if cell.cell_type == "code" and i in started
    ]
    return LearnerRun(name, _mode_line(nb), seconds, cells, finished)


def _remaining(t0: float, cell_timeout: float, deadline_s: float | None) -> int:
    if deadline_s is None:
        return int(cell_timeout)
    return max(1, int(min(cell_timeout, deadline_s - (time.monotonic() - t0))))


def run_file(path: Path, workdir: Path, **kwargs) -> LearnerRun:
    """Run a copy of the notebook at `path` from `workdir` (the file itself is not written)."""
    nb = nbformat.read(str(path), as_version=4)
    return run(nb, workdir=workdir, name=path.stem, **kwargs)
