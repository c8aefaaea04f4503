"""`course grade`: run each submission in its own process and folder, read only what the
restored check cells emitted, and write grades.csv, summary.csv and per-learner feedback.

A submission is never written to. Before it runs, its locked check cells are restored from
`solutions/` by grade_id (a deleted or edited check comes back as the instructor wrote it),
every output is cleared, and the restored cells are tagged in metadata by the grader. Only
outputs of those tagged cells, with the mimetype and the right check id, count; anything a
learner prints or displays elsewhere is ignored.
"""

from __future__ import annotations

import hashlib
import json
import queue
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import nbformat
from tqdm.auto import tqdm

from .authoring import check_cells, read
from .errors import UsageError
from .feedback import feedback, write_csvs
from .isolated import execute_isolated
from .protocol import ERROR, GRADE_COLUMNS, MIME, MISSING, TIMEOUT
from .restore import lesson_for, restore_checks

STATE_FILE = ".grading-state.json"


@dataclass
class Row:
    """One row of grades.csv: one check of one submission."""

    submission: str
    notebook: str
    check: str
    status: str
    points: float
    max_points: float
    value: float | None
    threshold: float | None
    device_class: str
    message: str
    hint: str = ""  # hint and parts are for the feedback only, not grades.csv columns
    parts: list = field(default_factory=list)

    @classmethod
    def columns(cls) -> list[str]:
        return list(GRADE_COLUMNS)


@dataclass
class Submission:
    path: Path
    name: str  # as shown in grades.csv: relative to the folder given, or the file name

    @property
    def slug(self) -> str:
        return self.name.removesuffix(".ipynb").replace("/", "__").replace("\\", "__")


def find_submissions(paths: list[Path]) -> list[Submission]:
    found = []
    for path in paths:
        if not path.exists():
            raise UsageError(f"no such file or folder: {path}")
        if path.is_file():
            found.append(Submission(path, path.name))
        else:
            for nb in sorted(path.rglob("*.ipynb")):
                if ".ipynb_checkpoints" not in nb.parts:
                    found.append(Submission(nb, nb.relative_to(path).as_posix()))
    if not found:
        raise UsageError("nothing to grade: no .ipynb files in " + ", ".join(map(str, paths)))
    return found


def _error_line(cell) -> tuple[str, str] | None:
    for out in cell.get("outputs", []):
        if out.get("output_type") == "error":
            return out.get("ename", "Error"), str(out.get("evalue", "")).strip().splitlines()[0:1]
    return None


def read_results(executed, sol, lesson: str, run_status: dict, cell_timeout: float) -> list[dict]:
    """One result per solution check, from the tagged cells' structured outputs only."""
    results = []
    for cid, (_, sol_cell) in check_cells(sol, lesson).items():
        points = float(sol_cell.metadata.get("nbgrader", {}).get("points", 1))
        base = {
            "check": cid,
            "points": 0.0,
            "max_points": points,
            "value": None,
            "threshold": None,
            "device_class": "",
        }
        cell = next(
            (c for c in executed.cells if c.metadata.get("course", {}).get("check") == cid), None
        )
        payload = None
        for out in cell.get("outputs", []) if cell else []:
            data = (
                out.get("data", {}).get(MIME) if out.get("output_type") == "display_data" else None
            )
            if isinstance(data, dict) and data.get("check_id") == cid:
                payload = data
        if payload is not None:
            results.append(
                {
                    **base,
                    "status": payload.get("status", ERROR),
                    "points": min(float(payload.get("points", 0.0)), points),
                    "value": payload.get("value"),
                    "threshold": payload.get("threshold"),
                    "device_class": payload.get("device_class", ""),
                    "message": payload.get("message", ""),
                    "hint": payload.get("hint", ""),
                    "parts": payload.get("parts", []),
                }
            )
            continue
        error = _error_line(cell) if cell else None
        if error and error[0] == "KeyboardInterrupt":
            results.append(
                {
                    **base,
                    "status": TIMEOUT,
                    "message": f"the check ran past the {cell_timeout:g} s cell limit and was interrupted",
                }
            )
        elif error:
            detail = f": {error[1][0]}" if error[1] else ""
            results.append(
                {**base, "status": ERROR, "message": f"the check cell raised {error[0]}{detail}"}
            )
        else:
            why = {
                "kernel-died": "the kernel died before this check ran (a cell crashed the Python process, e.g. os._exit or out of memory)",
                "notebook-timeout": "the notebook ran past its total time limit before this check ran",
                "crashed": f"execution stopped before this check ran ({run_status.get('detail', '')})",
            }.get(run_status.get("outcome"), "the check cell produced no result")
            results.append({**base, "status": MISSING, "message": why})
    return results


def _fingerprint(data: bytes, settings: str) -> str:
    """Same submission, same settings: the grades can be reused."""
    return hashlib.sha256(data + settings.encode()).hexdigest()


HARNESS = Path(__file__).parent


def grading_settings(
    sol_paths: list[Path], cell_timeout: float, quick: bool, *, harness: Path = HARNESS
) -> str:
    """Everything besides the submission that decides its grades: the solution notebooks
    (locked checks), the harness's own code (check bodies, thresholds), the device class and
    torch version, and the run settings. A change to any of them invalidates reused grades."""
    import torch  # only when grading: `course --help` and `course assign` start without it

    from . import device

    digest = hashlib.sha256()
    for path in sol_paths:
        digest.update(path.read_bytes())
    for path in sorted(harness.rglob("*.py")):
        digest.update(path.relative_to(harness).as_posix().encode() + path.read_bytes())
    return (
        f"{digest.hexdigest()}|{device.device_class()}|{torch.__version__}|{cell_timeout}|{quick}"
    )


def _gpu_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def grade_one(
    sub: Submission,
    solutions: dict,
    out: Path,
    *,
    cell_timeout: float,
    notebook_timeout: float,
    quick: bool,
    gpu: int | None = None,
) -> tuple[list[Row], dict]:
    """Grade one submission; returns its rows and the notes for its feedback."""

    def rows_of(lesson: str, results: list[dict]) -> list[Row]:
        return [Row(sub.name, lesson, **r) for r in results]

    try:
        data = sub.path.read_bytes()
        nb = nbformat.reads(data.decode("utf-8"), as_version=4)
        if not hasattr(nb, "cells"):
            raise ValueError("no cells")
    except Exception as exc:
        reason = f"not a readable notebook ({type(exc).__name__}: {str(exc).strip().splitlines()[0][:150] if str(exc).strip() else ''})"
        return [Row(sub.name, "", "", ERROR, 0.0, 0.0, None, None, "", reason)], {}
    lesson = lesson_for(nb, sub.path.name, solutions)
    if lesson is None:
        return [
            Row(
                sub.name,
                "",
                "",
                ERROR,
                0.0,
                0.0,
                None,
                None,
                "",
                "not a notebook of this course: no lesson matches its metadata, name or check cells",
            )
        ], {}
    prepared, notes = restore_checks(nb, solutions[lesson], lesson)
    with tempfile.TemporaryDirectory(prefix="course-grade-") as tmp:
        executed, status = execute_isolated(
            prepared,
            Path(tmp),
            cell_timeout=cell_timeout,
            notebook_timeout=notebook_timeout,
            quick=quick,
            gpu=gpu,
        )
        if executed is not None:
            (out / "executed").mkdir(parents=True, exist_ok=True)
            nbformat.write(executed, str(out / "executed" / f"{sub.slug}.ipynb"))
    results = read_results(executed or prepared, solutions[lesson], lesson, status, cell_timeout)
    return rows_of(lesson, results), notes


@dataclass
class GradeSummary:
    out: Path
    submissions: int
    reused: int
    counts: dict[str, int]

    def __str__(self) -> str:
        counts = ", ".join(f"{k} {v}" for k, v in sorted(self.counts.items()))
        return (
            f"graded {self.submissions} submission(s) ({self.reused} unchanged, reused) -> "
            f"{self.out / 'grades.csv'}; checks: {counts or 'none'}"
        )


def grade(
    paths: list[Path],
    out: Path = Path("grades"),
    solutions: Path = Path("solutions"),
    *,
    cell_timeout: float = 600,
    notebook_timeout: float | None = None,
    quick: bool = False,
    jobs: int = 1,
) -> GradeSummary:
    """Grade every submission under `paths`; see the module docstring."""
    subs = find_submissions(paths)
    sol_paths = sorted(Path(solutions).glob("*.ipynb"))
    if not sol_paths:
        raise UsageError(
            f"no solution notebooks in {solutions}: the locked check cells come from there"
        )
    sols = {p.stem: read(p) for p in sol_paths}
    settings = grading_settings(sol_paths, cell_timeout, quick)
    notebook_timeout = notebook_timeout or max(3600.0, 4 * cell_timeout)
    gpus = _gpu_count() if jobs > 1 else 0
    if jobs > 1:
        print(
            f"Grading {jobs} submissions at a time: timing checks get noisy; use --jobs 1 for final grades.",
            file=sys.stderr,
        )
    out.mkdir(parents=True, exist_ok=True)
    (out / "feedback").mkdir(exist_ok=True)
    state_path = out / STATE_FILE
    state = json.loads(state_path.read_text()) if state_path.exists() else {}
    slots: queue.Queue[int] = queue.Queue()
    for slot in range(max(1, jobs)):
        slots.put(slot)

    def work(sub: Submission) -> tuple[Submission, list[Row], dict | None]:
        """Grade one submission in a worker thread; returns its new state entry (None when
        reused). Only the main thread touches `state`."""
        try:
            data = sub.path.read_bytes()
        except OSError:
            data = b""
        key = _fingerprint(data, settings)
        previous = state.get(sub.name)
        if (
            previous
            and previous["fingerprint"] == key
            and (out / "feedback" / f"{sub.slug}.md").exists()
        ):
            return sub, [Row(**r) for r in previous["rows"]], None
        t0 = time.perf_counter()
        slot = slots.get()
        try:
            rows, notes = grade_one(
                sub,
                sols,
                out,
                cell_timeout=cell_timeout,
                notebook_timeout=notebook_timeout,
                quick=quick,
                gpu=slot % gpus if gpus > 1 else None,
            )
        finally:
            slots.put(slot)
        (out / "feedback" / f"{sub.slug}.md").write_text(
            feedback(sub, rows, notes), encoding="utf-8"
        )
        entry = {
            "fingerprint": key,
            "rows": [asdict(r) for r in rows],
            "seconds": time.perf_counter() - t0,
        }
        return sub, rows, entry

    results: dict[str, tuple[list[Row], bool]] = {}
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for sub, rows, entry in tqdm(
            pool.map(work, subs), total=len(subs), desc="grading", unit="notebook"
        ):
            results[sub.name] = (rows, entry is None)
            if entry is not None:
                state[sub.name] = entry
                state_path.write_text(json.dumps(state, indent=1))
    write_csvs(out, [results[s.name][0] for s in subs])
    counts: dict[str, int] = {}
    for rows, _ in results.values():
        for r in rows:
            counts[r.status] = counts.get(r.status, 0) + 1
    return GradeSummary(out, len(subs), sum(reused for _, reused in results.values()), counts)
