"""Run one notebook with papermill in this process: the child side of `course grade`.

`python -m course_utils.grading.execute IN OUT --cell-timeout S [--quick] [--parent-pid P]
[--witness-fd FD] [--box DIR --harness DIR --isolation LEVEL ...]` executes IN into OUT, going
on past failing cells (nbclient's allow_errors) and interrupting a cell that runs past its
limit. It always says how the run ended, because a dead kernel or a crash must become a reason
in the grades, not a lost notebook.

With --box (grading), the kernel runs in BOX under the sandbox of --isolation
(course_utils.grading.sandbox), importing the answer-free harness at --harness, and this
process is also the judge (course_utils.grading.judge): the kernel's check cells ask it for
their verdicts over a socket in BOX. IN and OUT are outside BOX, out of the kernel's sight.

The witness: what the grader trusts comes over FD, a pipe the kernel does not inherit, from a
process whose /proc entries it cannot open (not dumpable): each cell as it starts, each
verdict the judge reached, the sha256 of every save of OUT, and the final status. The parent
reads OUT only if its bytes match the last digest (a kernel run with --isolation none shares
our user and could write there).

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
from dataclasses import dataclass
from pathlib import Path

from .sandbox import FULL_HARNESS, Isolation

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


class Running:
    """Which cell runs now, as papermill reports it: (its index, its check id or None)."""

    def __init__(self) -> None:
        self.cell: tuple[int, str | None] | None = None


def witnessed_saves(witness: Witness, running: Running | None = None) -> None:
    """Make papermill report each cell start (and end, to `running`) and the digest of each
    write of the executed notebook (its manager's saves, and the final write after an error),
    writing the bytes it hashes under a temporary name, then renaming."""
    import nbformat
    import papermill.engines
    import papermill.execute

    running = running or Running()

    def write_ipynb(nb, path) -> None:
        data = nbformat.writes(nb).encode("utf-8")
        tmp = Path(str(path) + ".saving")
        tmp.write_bytes(data)
        tmp.replace(path)
        witness.send(saved=hashlib.sha256(data).hexdigest())

    manager = papermill.engines.NotebookExecutionManager
    start, complete = manager.cell_start, manager.cell_complete

    def cell_start(self, cell, cell_index=None, **kwargs):
        witness.send(running=cell_index, cell_id=cell.get("id"))
        running.cell = (cell_index, cell.get("metadata", {}).get("course", {}).get("check"))
        return start(self, cell, cell_index, **kwargs)

    def cell_complete(self, cell, cell_index=None, **kwargs):
        running.cell = None
        return complete(self, cell, cell_index, **kwargs)

    manager.cell_start, manager.cell_complete = cell_start, cell_complete
    papermill.engines.write_ipynb = papermill.execute.write_ipynb = write_ipynb


@dataclass
class Box:
    """Where and how the grading kernel runs (see the module docstring)."""

    folder: Path
    harness: Path
    isolation: Isolation
    lesson: str | None = None  # the lesson package, imported by the judge ahead of time


def sandboxed_manager(box: Box):
    """A kernel manager whose kernel runs in `box`: its connection file and sockets (IPC, no
    network needed) in the box, its command wrapped by the sandbox, its environment chosen by
    it, and $COURSE_JUDGE pointing at the judge."""
    from jupyter_client.manager import AsyncKernelManager

    from ..judged import JUDGE_ENV
    from . import sandbox

    class SandboxedKernelManager(AsyncKernelManager):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.transport = "ipc"
            self.ip = str(box.folder / "runtime" / "kernel")
            self.connection_file = str(box.folder / "runtime" / "kernel.json")

        @property
        def kernel_spec(self):
            """Interrupted by a message the kernel acts on itself: a signal would reach the
            sandbox's own process (bwrap), which would die of it, and the kernel with it."""
            spec = super().kernel_spec
            if spec is not None:
                spec.interrupt_mode = "message"
            return spec

        async def _async_launch_kernel(self, kernel_cmd, **kw):
            env = sandbox.kernel_environment(os.environ, box.folder, box.harness, box.isolation)
            env[JUDGE_ENV] = str(box.folder / JUDGE_SOCKET)
            kw["env"] = env
            kw["cwd"] = str(box.folder)
            sandbox.give_to_kernel(Path(self.connection_file), box.isolation, box.harness)
            cmd = sandbox.command(kernel_cmd, box.folder, box.harness, FULL_HARNESS, box.isolation)
            return await super()._async_launch_kernel(cmd, **kw)

    return SandboxedKernelManager


JUDGE_SOCKET = "judge.sock"


def start_judge(box: Box, running: Running, witness: Witness):
    """The judge for this run, listening in the box; it reports each verdict on the witness."""
    from .judge import Judge

    def report(check_id: str, verdict: dict | None, detail: str) -> None:
        if verdict is None:
            witness.send(lost=check_id, detail=detail)
        else:
            witness.send(verdict=verdict)

    def current() -> tuple[int, str | None] | None:
        return running.cell

    if box.lesson:  # import the lesson (and torch) while the kernel starts
        threading.Thread(target=_import_lesson, args=(box.lesson,), daemon=True).start()
    return Judge(box.folder / JUDGE_SOCKET, current, report).start()


def _import_lesson(package: str) -> None:
    import importlib

    try:
        importlib.import_module(f"course_utils.lessons.{package}")
    except Exception:  # the judge imports it again when a check needs it, and reports then
        pass


def execute(
    input_path: Path,
    output_path: Path,
    *,
    cell_timeout: float,
    quick: bool,
    witness: Witness | None = None,
    box: Box | None = None,
) -> dict:
    import papermill as pm
    from papermill.exceptions import PapermillExecutionError

    from .. import mode

    witness = witness or Witness(None)
    running = Running()
    witnessed_saves(witness, running)
    judge, engine = None, {}
    if box is not None:
        mode.set_quick(quick)  # the judge's check bodies size their work as the kernel does
        judge = start_judge(box, running, witness)
        engine["kernel_manager_class"] = sandboxed_manager(box)

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
            cwd=str(box.folder if box is not None else input_path.parent),
            **engine,
        )
    except PapermillExecutionError:
        pass  # errors inside cells are expected; the grader reads them from the notebook
    except Exception as exc:  # dead kernel, kernel that never started, unreadable notebook
        name = type(exc).__name__
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        outcome = "kernel-died" if "DeadKernel" in name else "crashed"
        status = {"outcome": outcome, "detail": f"{name}: {detail}"[:300]}
    finally:
        if judge is not None:
            judge.close()
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
    parser.add_argument("--box", type=Path, help="grade: the kernel's folder (module docstring)")
    parser.add_argument("--harness", type=Path, help="grade: the kernel's course_utils parent")
    parser.add_argument("--isolation", default="none", help="grade: bwrap, user or none")
    parser.add_argument("--uid", type=int, help="grade: the grading user's uid (user isolation)")
    parser.add_argument("--gid", type=int, help="grade: its gid")
    parser.add_argument("--lesson", help="grade: the lesson package the notebook imports")
    args = parser.parse_args(argv)
    if args.parent_pid:
        die_with_parent(args.parent_pid)
    witness = Witness(args.witness_fd)
    box = None
    if args.box is not None:
        isolation = Isolation(args.isolation, args.uid, args.gid)
        box = Box(args.box, args.harness, isolation, args.lesson)
    execute(
        args.input,
        args.output,
        cell_timeout=args.cell_timeout,
        quick=args.quick,
        witness=witness,
        box=box,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
