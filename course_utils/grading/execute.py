"""Run one notebook with papermill in this process: the child side of `course grade`.

`python -m course_utils.grading.execute IN OUT --cell-timeout S [--quick] [--parent-pid P]
[--witness-fd FD]` executes IN into OUT, going on past failing cells (nbclient's allow_errors)
and interrupting a cell that runs past its limit. It always says how the run ended, because a
dead kernel or a crash must become a reason in the grades, not a lost notebook.

The witness: the kernel runs the learner's code as our user, in OUT's folder, so it could
rewrite OUT (or a status file) after we wrote it. What the grader trusts comes instead over
FD, a pipe the kernel does not inherit, from a process whose /proc entries it cannot open
(not dumpable): each cell as it starts, the sha256 of every save of OUT, and the final status.
The parent reads OUT only if its bytes match the last digest.

With --parent-pid it dies with its parent (a grader, a Dask worker killed mid-task): a
grading run whose worker died must not go on beside its retry. Its kernel follows it, as
ipykernel exits when its own parent (this process, JPY_PARENT_PID) goes away.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent(parent_pid: int, poll_s: float = 0.5) -> None:
    """Exit when `parent_pid` is no longer our parent. On Linux the kernel sends SIGKILL the
    moment the parent (its spawning thread) exits; elsewhere, and as a backstop for a parent
    that died before the prctl, a daemon thread polls our parent pid."""
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):  # no libc prctl: the watchdog below still runs
            pass

    def watchdog() -> None:
        while True:
            if os.getppid() != parent_pid:
                os._exit(1)
            time.sleep(poll_s)

    if os.getppid() != parent_pid:
        os._exit(1)
    threading.Thread(target=watchdog, name="die-with-parent", daemon=True).start()


PR_SET_DUMPABLE = 4  # <linux/prctl.h>


class Witness:
    """One JSON object per line on a pipe only the grader reads (see the module docstring)."""

    def __init__(self, fd: int | None):
        self.file = None
        if fd is not None:
            os.set_inheritable(fd, False)  # the kernel, started by papermill, must not get it
            self.file = os.fdopen(fd, "w", buffering=1, encoding="utf-8")
            if sys.platform.startswith("linux"):
                try:  # our /proc/PID/fd then belongs to root: the kernel cannot reopen the pipe
                    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
                except (OSError, AttributeError):
                    pass

    def send(self, **message) -> None:
        if self.file is not None:
            self.file.write(json.dumps(message) + "\n")


def witnessed_saves(witness: Witness) -> None:
    """Make papermill report each cell start and the digest of each write of the executed
    notebook (its manager's saves, and the final write after an error), writing the bytes it
    hashes under a temporary name, then renaming."""
    import nbformat
    import papermill.engines
    import papermill.execute

    def write_ipynb(nb, path) -> None:
        data = nbformat.writes(nb).encode("utf-8")
        tmp = Path(str(path) + ".saving")
        tmp.write_bytes(data)
        tmp.replace(path)
        witness.send(saved=hashlib.sha256(data).hexdigest())

    manager = papermill.engines.NotebookExecutionManager
    start = manager.cell_start

    def cell_start(self, cell, cell_index=None, **kwargs):
        witness.send(running=cell_index, cell_id=cell.get("id"))
        return start(self, cell, cell_index, **kwargs)

    manager.cell_start = cell_start
    papermill.engines.write_ipynb = papermill.execute.write_ipynb = write_ipynb


def execute(
    input_path: Path,
    output_path: Path,
    *,
    cell_timeout: float,
    quick: bool,
    witness: Witness | None = None,
) -> dict:
    import papermill as pm
    from papermill.exceptions import PapermillExecutionError

    witness = witness or Witness(None)
    witnessed_saves(witness)

    status = {"outcome": "completed", "detail": ""}
    try:
        pm.execute_notebook(
            str(input_path),
            str(output_path),
            parameters={"quick": True} if quick else {},
            kernel_name="python3",
            execution_timeout=cell_timeout,
            allow_errors=True,  # one broken exercise must not stop the others' checks
            interrupt_on_timeout=True,  # a hanging cell is interrupted; the next cell runs
            progress_bar=False,
            cwd=str(input_path.parent),
        )
    except PapermillExecutionError:
        pass  # errors inside cells are expected; the grader reads them from the notebook
    except Exception as exc:  # dead kernel, kernel that never started, unreadable notebook
        name = type(exc).__name__
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        outcome = "kernel-died" if "DeadKernel" in name else "crashed"
        status = {"outcome": outcome, "detail": f"{name}: {detail}"[:300]}
    witness.send(status=status)
    return status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_utils.grading.execute")
    parser.add_argument("input", type=Path)
    parser.add_argument("output", type=Path)
    parser.add_argument("--cell-timeout", type=float, default=600)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--parent-pid", type=int, help="exit when this process is gone")
    parser.add_argument("--witness-fd", type=int, help="the grader's pipe (module docstring)")
    args = parser.parse_args(argv)
    if args.parent_pid:
        die_with_parent(args.parent_pid)
    witness = Witness(args.witness_fd)
    execute(
        args.input, args.output, cell_timeout=args.cell_timeout, quick=args.quick, witness=witness
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
