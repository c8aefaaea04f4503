"""Run one notebook with papermill in this process: the child side of `course grade`.

`python -m course_utils.execute IN OUT --cell-timeout S [--quick] [--parent-pid P]` executes
IN into OUT, going on past failing cells (nbclient's allow_errors) and interrupting a cell
that runs past its limit. It always leaves OUT.status.json saying how the run ended, because
a dead kernel or a crash must become a reason in the grades, not a lost notebook.

With --parent-pid it dies with its parent (a grader, a Dask worker killed mid-task): a
grading run whose worker died must not go on beside its retry. Its kernel follows it, as
ipykernel exits when its own parent (this process, JPY_PARENT_PID) goes away.
"""

from __future__ import annotations

import argparse
import ctypes
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


def status_path(output: Path) -> Path:
    return output.with_name(output.name + ".status.json")


def execute(input_path: Path, output_path: Path, *, cell_timeout: float, quick: bool) -> dict:
    import papermill as pm
    from papermill.exceptions import PapermillExecutionError

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
    status_path(output_path).write_text(json.dumps(status))
    return status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_utils.execute")
    parser.add_argument("input", type=Path)
    parser.add_argument("output", type=Path)
    parser.add_argument("--cell-timeout", type=float, default=600)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--parent-pid", type=int, help="exit when this process is gone")
    args = parser.parse_args(argv)
    if args.parent_pid:
        die_with_parent(args.parent_pid)
    execute(args.input, args.output, cell_timeout=args.cell_timeout, quick=args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
