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
import queue
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import nbformat
from tqdm.auto import tqdm

from .authoring import check_cells, read
from .demos import skip_demos
from .errors import UsageError
from .isolated import execute_isolated
from .outbox import GradeSummary, Outbox
from .protocol import ERROR, MIME, MISSING, TIMEOUT
from .records import Graded, Row, Submission
from .restore import lesson_for, restore_checks


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


@dataclass(frozen=True)
class RunSettings:
    """How each notebook is run: part of every reuse fingerprint."""

    cell_timeout: float
    notebook_timeout: float
    quick: bool
    checks_only: bool = False

    def tag(self) -> str:
        # notebook_timeout is left out (as before): it ends hangs, it does not change grades
        return f"{self.cell_timeout}|{self.quick}" + ("|checks-only" if self.checks_only else "")


def solutions_digest(sol_paths: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in sol_paths:
        digest.update(path.read_bytes())
    return digest.hexdigest()


def machine_settings(harness: Path = HARNESS) -> str:
    """What the grading machine contributes to a fingerprint: the harness's own code (check
    bodies, thresholds), the device class and the torch version. Computed where the notebook
    runs (a Dask worker, a shard's node), never assumed from the client."""
    import torch  # only when grading: `course --help` and `course assign` start without it

    from . import device

    digest = hashlib.sha256()
    for path in sorted(harness.rglob("*.py")):
        digest.update(path.relative_to(harness).as_posix().encode() + path.read_bytes())
    return f"{digest.hexdigest()}|{device.device_class()}|{torch.__version__}"


def device_class_of(machine: str) -> str:
    return machine.split("|")[1]


def settings_string(sol_digest: str, machine: str, run_tag: str) -> str:
    return f"{sol_digest}|{machine}|{run_tag}"


def grading_settings(
    sol_paths: list[Path],
    cell_timeout: float,
    quick: bool,
    *,
    harness: Path = HARNESS,
    checks_only: bool = False,
) -> str:
    """Everything besides the submission that decides its grades: the solution notebooks
    (locked checks), the harness's own code, the device class and torch version, and the run
    settings. A change to any of them invalidates reused grades."""
    run = RunSettings(cell_timeout, 0, quick, checks_only)
    return settings_string(solutions_digest(sol_paths), machine_settings(harness), run.tag())


def _gpu_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def grade_submission(
    name: str,
    filename: str,
    data: bytes,
    solutions: dict,
    run: RunSettings,
    *,
    gpu: int | None = None,
    env: dict[str, str | None] | None = None,
) -> Graded:
    """Grade one submission from its bytes (no path needed: a Dask worker has none) in a
    temporary folder; return its rows, notes and executed notebook."""
    t0 = time.perf_counter()
    try:
        nb = nbformat.reads(data.decode("utf-8"), as_version=4)
        if not hasattr(nb, "cells"):
            raise ValueError("no cells")
    except Exception as exc:
        text = str(exc).strip()
        reason = f"not a readable notebook ({type(exc).__name__}: {text.splitlines()[0][:150] if text else ''})"
        return Graded([Row.error(name, reason)], seconds=time.perf_counter() - t0)
    lesson = lesson_for(nb, filename, solutions)
    if lesson is None:
        reason = (
            "not a notebook of this course: no lesson matches its metadata, name or check cells"
        )
        return Graded([Row.error(name, reason)], seconds=time.perf_counter() - t0)
    prepared, notes = restore_checks(nb, solutions[lesson], lesson)
    skipped = 0
    if run.checks_only:
        prepared, skipped = skip_demos(prepared, solutions[lesson])
    with tempfile.TemporaryDirectory(prefix="course-grade-") as tmp:
        executed, status = execute_isolated(
            prepared,
            Path(tmp),
            cell_timeout=run.cell_timeout,
            notebook_timeout=run.notebook_timeout,
            quick=run.quick,
            gpu=gpu,
            env=env,
        )
    results = read_results(
        executed or prepared, solutions[lesson], lesson, status, run.cell_timeout
    )
    from . import device

    here = device.device_class()
    rows = [Row(name, lesson, **r) for r in results]
    for row in rows:  # a check that never reported (missing, timeout) still ran on this device
        row.device_class = row.device_class or here
    return Graded(
        rows, notes, executed, time.perf_counter() - t0, device_class=here, skipped_demos=skipped
    )


def read_data(sub: Submission) -> bytes:
    try:
        return sub.path.read_bytes()
    except OSError:
        return b""


def grade(
    paths: list[Path],
    out: Path = Path("grades"),
    solutions: Path = Path("solutions"),
    *,
    cell_timeout: float = 600,
    notebook_timeout: float | None = None,
    quick: bool = False,
    jobs: int = 1,
    checks_only: bool = False,
    dask: str | None = None,
    shard: str | None = None,
    allow_mixed_devices: bool = False,
) -> GradeSummary:
    """Grade every submission under `paths` (see the module docstring): on this machine, on a
    Dask cluster (`dask`: an address or local:N), or only one shard's part (`shard`: I/N)."""
    subs = find_submissions(paths)
    sol_paths = sorted(Path(solutions).glob("*.ipynb"))
    if not sol_paths:
        raise UsageError(
            f"no solution notebooks in {solutions}: the locked check cells come from there"
        )
    sols = {p.stem: read(p) for p in sol_paths}
    run = RunSettings(
        cell_timeout, notebook_timeout or max(3600.0, 4 * cell_timeout), quick, checks_only
    )
    if shard is not None:
        from .shards import start_shard

        subs, out = start_shard(subs, out, shard, solutions_digest(sol_paths), run)
    if dask is not None:
        from .cluster import grade_on_dask

        return grade_on_dask(
            subs,
            sols,
            solutions_digest(sol_paths),
            run,
            Outbox(out),
            dask,
            allow_mixed_devices=allow_mixed_devices,
        )
    settings = grading_settings(sol_paths, cell_timeout, quick, checks_only=checks_only)
    gpus = _gpu_count() if jobs > 1 else 0
    if jobs > 1:
        print(
            f"Grading {jobs} submissions at a time: timing checks get noisy; use --jobs 1 for final grades.",
            file=sys.stderr,
        )
    outbox = Outbox(out)
    slots: queue.Queue[int] = queue.Queue()
    for slot in range(max(1, jobs)):
        slots.put(slot)

    def work(sub: Submission) -> tuple[Submission, Graded | list[Row]]:
        """Grade one submission in a worker thread, or return its reused rows. Only the main
        thread touches the outbox (a dict mutated while json.dumps iterates it fails)."""
        data = read_data(sub)
        key = _fingerprint(data, settings)
        reused = outbox.reusable(sub, {key})
        if reused is not None:
            return sub, reused
        slot = slots.get()
        try:
            graded = grade_submission(
                sub.name, sub.path.name, data, sols, run, gpu=slot % gpus if gpus > 1 else None
            )
        finally:
            slots.put(slot)
        graded.key = key
        return sub, graded

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        try:
            for sub, result in tqdm(
                pool.map(work, subs), total=len(subs), desc="grading", unit="notebook"
            ):
                if isinstance(result, Graded):
                    outbox.record(sub, result)
                else:
                    outbox.reuse(sub, result)
        except BaseException:  # Ctrl-C: start nothing more; the state file has what was done
            pool.shutdown(wait=False, cancel_futures=True)
            raise
    return outbox.finish(subs)
