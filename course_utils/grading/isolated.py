"""Run a notebook in a child process inside its own folder, with limits: the parent side of
`course_utils.grading.execute`, shared by `course grade` and `course report`.

Each run gets a per-cell timeout (papermill interrupts the cell), a whole-notebook limit (the
process tree is killed), and a kernel environment chosen for a shared machine. It always
returns a status saying how the run ended, because a dead kernel or a crash must become a
reason in the grades, not a lost notebook.

What it trusts comes over the child's witness pipe (see course_utils.grading.execute): the
status, the last cell started, the judge's verdicts (grading), and the digest of the last save
of the executed notebook. A notebook file whose bytes differ from that digest was written by
something else: it is not read, and the run's outcome is `tampered`.

Grading (`sandboxed`): the kernel gets its own folder, workdir/box, and runs under the
sandbox (course_utils.grading.sandbox) with the answer-free harness; the notebook files stay
in workdir, which the kernel may pass through but not list (user isolation) or not see at
all (bwrap).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import nbformat

from .sandbox import Isolation, prepare_box

RUNNING: set[subprocess.Popen] = set()  # the children in flight, for stopped()
_STOPPING = threading.Event()  # set while an engine stops: a child starting then is killed


@contextlib.contextmanager
def stopped() -> Iterator[None]:
    """Kill every child in flight and its kernel, now, and any that starts until the block
    ends (the engine waits there for its threads): Ctrl-C must not wait for a notebook."""
    _STOPPING.set()
    try:
        for proc in list(RUNNING):
            _kill_tree(proc)
        yield
    finally:
        _STOPPING.clear()


def _kill_tree(proc: subprocess.Popen) -> None:
    from ..processes import kill_tree  # psutil: imported when a kernel must be stopped

    kill_tree(proc.pid, wait_s=0)


GRADING_ENV = "COURSE_GRADING"  # read by course_utils.checks.stops_the_run


def kernel_env(
    *, quick: bool, gpu: int | None = None, overrides: dict[str, str | None] | None = None
) -> dict[str, str]:
    """The environment a grading kernel starts with.

    Figures: the kernel's inline backend turns each figure into an image output (which the
    report keeps); an inherited MPLBACKEND=Agg would replace it and lose every plot.
    Threads: torch's OpenMP threads wait passively, so a kernel beside other jobs is not
    slowed by its own spinning threads (see course_utils/__init__.py for the measurement).
    GPU: with --jobs N, each job sees one GPU of its own (None: all GPUs, as inherited).
    Overrides: values to put back (None: unset), e.g. the thread settings a Dask Nanny capped.
    """
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_WAIT_POLICY": "PASSIVE"}
    env[GRADING_ENV] = "1"  # check cells report and go on: a raise would void their result
    env["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
    if quick:
        env["COURSE_QUICK"] = "1"
    elif not env.get("COURSE_QUICK", "").strip():
        env["COURSE_QUICK"] = "0"  # full, as asked: never left to the auto mode
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = str(gpu)
    for key, value in (overrides or {}).items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


@dataclass(frozen=True)
class Sandboxed:
    """How a submission's kernel is run when grading: isolated, on the answer-free harness
    (the folder holding its course_utils), judged from outside."""

    isolation: Isolation
    harness: Path
    lesson: str | None = None  # the lesson package the notebook imports


def execute_isolated(
    nb,
    workdir: Path,
    *,
    cell_timeout: float,
    notebook_timeout: float,
    quick: bool,
    gpu: int | None = None,
    env: dict[str, str | None] | None = None,
    sandboxed: Sandboxed | None = None,
) -> tuple[nbformat.NotebookNode | None, dict]:
    """Run `nb` in a child process inside `workdir`; return the executed notebook and status
    (with the judge's `verdicts` and `lost` sessions, by check id, when `sandboxed`). The
    child dies with this process (see course_utils.grading.execute), and its kernel with it."""
    src, out = workdir / "submission.ipynb", workdir / "executed.ipynb"
    nbformat.write(nb, str(src))
    read_end, write_end = os.pipe()
    cmd = [
        sys.executable,
        "-m",
        "course_utils.grading.execute",
        str(src),
        str(out),
        "--cell-timeout",
        str(cell_timeout),
        "--parent-pid",
        str(os.getpid()),
        "--witness-fd",
        str(write_end),
    ]
    if quick:
        cmd.append("--quick")
    if sandboxed is not None:
        cmd += _box_arguments(workdir, sandboxed)
    # the kernel's connection file goes in workdir, removed with it (or by a later sweep)
    overrides = {**(env or {}), "JUPYTER_RUNTIME_DIR": str(workdir / "runtime")}
    try:
        proc = subprocess.Popen(
            cmd,
            cwd=workdir,
            env=kernel_env(quick=quick, gpu=gpu, overrides=overrides),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            pass_fds=(write_end,),
            start_new_session=True,  # a terminal's Ctrl-C reaches the grader, which kills it
        )
    finally:
        os.close(write_end)  # the child holds it now: EOF on our end when the child is gone
    RUNNING.add(proc)
    if _STOPPING.is_set():  # started while the engine stops (after its sweep of RUNNING)
        _kill_tree(proc)
    witness = Witnessed(read_end)
    try:
        _, stderr = proc.communicate(timeout=notebook_timeout)
        witness.join()
        status = witness.status or {
            "outcome": "crashed",
            "detail": (stderr or "").strip().splitlines()[-1:][0]
            if stderr and stderr.strip()
            else f"exit code {proc.returncode}",
        }
    except subprocess.TimeoutExpired:
        _kill_tree(proc)
        proc.communicate()
        witness.join()
        status = {"outcome": "notebook-timeout", "detail": f"ran past {notebook_timeout:g} s"}
    finally:
        RUNNING.discard(proc)
    status = {**status, "last_cell": witness.last_cell}
    if sandboxed is not None:
        status |= {"verdicts": witness.verdicts, "lost": witness.lost}
    executed = witness.read(out)
    if executed is None and out.exists() and witness.saved:
        status = {**status, "outcome": "tampered", "detail": "its bytes differ from the last save"}
    return executed, status


def _box_arguments(workdir: Path, sandboxed: Sandboxed) -> list[str]:
    """The runner's grading arguments; makes the kernel's folder, workdir/box. workdir itself
    keeps the notebooks: others may pass through it (to the box) but not list it."""
    box = workdir / "box"
    box.mkdir()
    os.chmod(workdir, 0o711)
    prepare_box(box, sandboxed.isolation, sandboxed.harness)
    isolation = sandboxed.isolation
    args = ["--box", str(box), "--harness", str(sandboxed.harness)]
    args += ["--isolation", isolation.level]
    if isolation.uid is not None:
        args += ["--uid", str(isolation.uid), "--gid", str(isolation.gid)]
    if sandboxed.lesson:
        args += ["--lesson", sandboxed.lesson]
    return args


class Witnessed:
    """The parent's end of the witness pipe, read by a thread while the child runs (so the
    pipe never fills): the cells started, the digests saved and the final status."""

    def __init__(self, fd: int):
        self.last_cell: str | int | None = None  # its cell id, else its index
        self.saved: str | None = None
        self.status: dict | None = None
        self.verdicts: dict[str, dict] = {}  # check id -> the judge's verdict
        self.lost: dict[str, str] = {}  # check id -> why its session ended without one
        self._thread = threading.Thread(target=self._read, args=(fd,), daemon=True)
        self._thread.start()

    def _read(self, fd: int) -> None:
        with os.fdopen(fd, encoding="utf-8", errors="replace") as pipe:
            for line in pipe:
                try:
                    message = json.loads(line)
                except ValueError:  # a line cut by a kill: nothing after it can come
                    break
                if "running" in message:
                    self.last_cell = message.get("cell_id") or message["running"]
                if isinstance(message.get("verdict"), dict):
                    verdict = message["verdict"]
                    self.verdicts[str(verdict.get("check_id"))] = verdict
                if "lost" in message:
                    self.lost[str(message["lost"])] = str(message.get("detail", ""))
                self.saved = message.get("saved", self.saved)
                self.status = message.get("status", self.status)

    def join(self) -> None:
        self._thread.join(timeout=10)

    def read(self, out: Path) -> nbformat.NotebookNode | None:
        """The executed notebook, only if its bytes are those of the child's last save."""
        try:
            data = out.read_bytes()
        except OSError:
            return None
        if self.saved is None or hashlib.sha256(data).hexdigest() != self.saved:
            return None
        return nbformat.reads(data.decode("utf-8"), as_version=4)
