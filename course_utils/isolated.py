"""Run a notebook in a child process inside its own folder, with limits: the parent side of
`course_utils.execute`, shared by `course grade` and `course report`.

Each run gets a per-cell timeout (papermill interrupts the cell), a whole-notebook limit (the
process tree is killed), and a kernel environment chosen for a shared machine. It always
returns a status saying how the run ended, because a dead kernel or a crash must become a
reason in the grades, not a lost notebook.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import nbformat


def _kill_tree(proc: subprocess.Popen) -> None:
    import psutil

    try:
        parent = psutil.Process(proc.pid)
        for child in parent.children(recursive=True):
            child.kill()
        parent.kill()
    except psutil.NoSuchProcess:
        pass


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


def execute_isolated(
    nb,
    workdir: Path,
    *,
    cell_timeout: float,
    notebook_timeout: float,
    quick: bool,
    gpu: int | None = None,
    env: dict[str, str | None] | None = None,
) -> tuple[nbformat.NotebookNode | None, dict]:
    """Run `nb` in a child process inside `workdir`; return the executed notebook and status.
    The child dies with this process (see course_utils.execute), and its kernel with it."""
    src, out = workdir / "submission.ipynb", workdir / "executed.ipynb"
    nbformat.write(nb, str(src))
    cmd = [
        sys.executable,
        "-m",
        "course_utils.execute",
        str(src),
        str(out),
        "--cell-timeout",
        str(cell_timeout),
        "--parent-pid",
        str(os.getpid()),
    ]
    if quick:
        cmd.append("--quick")
    proc = subprocess.Popen(
        cmd,
        cwd=workdir,
        env=kernel_env(quick=quick, gpu=gpu, overrides=env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _, stderr = proc.communicate(timeout=notebook_timeout)
        status_file = out.with_name(out.name + ".status.json")
        status = (
            json.loads(status_file.read_text())
            if status_file.exists()
            else {
                "outcome": "crashed",
                "detail": (stderr or "").strip().splitlines()[-1:][0]
                if stderr and stderr.strip()
                else f"exit code {proc.returncode}",
            }
        )
    except subprocess.TimeoutExpired:
        _kill_tree(proc)
        proc.communicate()
        status = {"outcome": "notebook-timeout", "detail": f"ran past {notebook_timeout:g} s"}
    executed = None
    if out.exists():
        try:
            executed = nbformat.read(str(out), as_version=4)
        except Exception:  # a half-written file after a kill
            executed = None
    return executed, status
