"""Run one of this lesson's torchrun entry points from a notebook, with a deadline.

`python -m torch.distributed.run --standalone` is `torchrun` on a free port it picks itself,
so two notebooks or graders on one machine never collide. On timeout or an interrupted cell,
torchrun and every worker under it are killed (torchrun starts each worker in a session of
its own, so the whole process tree is collected first). Lesson 06 has a fuller launcher with
a per-process trace; this one only needs an exit code, the output and a JSON result file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from ...processes import kill_tree

LEARNER_ENV = "COURSE_LEARNER_RUN"  # set while a check runs the learner's code


@dataclass
class Launch:
    """What one launch did: exit code (None: killed at the deadline), time, output, result."""

    returncode: int | None
    seconds: float
    timeout_s: float
    output: str
    result: dict | None

    @property
    def timed_out(self) -> bool:
        return self.returncode is None

    def tail(self, lines: int = 12) -> str:
        return "\n".join(self.output.strip().splitlines()[-lines:])

    def failure(self, what: str) -> str:
        """One paragraph for a launch that timed out or wrote no result."""
        if self.timed_out:
            return (
                f"{what} did not finish within {self.timeout_s:.0f} s, so every process was "
                "killed (a rank that waits forever sits in a collective another rank never "
                "reaches). Last output:\n" + self.tail()
            )
        return f"{what} exited with code {self.returncode} and no result. Last output:\n" + (
            self.tail()
        )


def backend_for(world: int) -> str:
    """NCCL with one GPU per process where there are enough GPUs, else gloo on the CPU
    ($COURSE_DEVICE=cpu asks for the CPU whatever GPUs there are)."""
    requested = os.environ.get("COURSE_DEVICE")
    if requested and torch.device(requested).type != "cuda":
        return "gloo"
    return "nccl" if torch.cuda.is_available() and torch.cuda.device_count() >= world else "gloo"


def describe(world: int) -> str:
    if backend_for(world) == "nccl":
        return f"{world} processes (NCCL, one GPU each)"
    return f"{world} CPU processes (gloo, one thread each)"


class Running:
    """A launch under way (`start`); `finish()` waits for it, up to its deadline. Its output
    goes to a file, so a launch left running while the notebook computes never blocks."""

    def __init__(self, task: str, args, nproc: int, timeout_s: float, learner: bool) -> None:
        self._folder = tempfile.TemporaryDirectory(prefix="course13-")
        self.out = Path(self._folder.name) / "result.json"
        self._log = open(Path(self._folder.name) / "output.txt", "w+")  # noqa: SIM115
        command = [
            sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc_per_node={nproc}", "-m", "course_utils.lessons.fsdp.worker",
            task, *map(str, args), "--out", str(self.out),
        ]  # fmt: skip
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
        if learner:
            env[LEARNER_ENV] = "1"
        self.timeout_s, self._start = timeout_s, time.perf_counter()
        self._proc = subprocess.Popen(
            command, env=env, stdout=self._log, stderr=subprocess.STDOUT, text=True
        )

    def kill(self) -> None:
        """Stop it now (a measurement beside it failed), and remove its files."""
        if self._proc.poll() is None:
            _kill_tree(self._proc)
        self._log.close()
        self._folder.cleanup()

    def finish(self) -> Launch:
        left = max(1.0, self.timeout_s - (time.perf_counter() - self._start))
        try:
            code = self._proc.wait(timeout=left)
        except subprocess.TimeoutExpired:
            _kill_tree(self._proc)
            code = None
        except BaseException:  # an interrupted cell must not leave ranks behind
            _kill_tree(self._proc)
            self._folder.cleanup()
            raise
        seconds = time.perf_counter() - self._start
        self._log.seek(0)
        output = self._log.read()
        self._log.close()
        result = json.loads(self.out.read_text()) if self.out.exists() else None
        self._folder.cleanup()
        return Launch(code, seconds, self.timeout_s, output, result)


def start(
    task: str, args: list = (), *, nproc: int = 2, timeout_s: float = 180, learner=False
) -> Running:
    """Start `course_utils.lessons.fsdp.worker <task>` on `nproc` processes; rank 0 writes the
    result as JSON to a file that `finish()` reads back."""
    return Running(task, args, nproc, timeout_s, learner)


def torchrun(task: str, args: list = (), **options) -> Launch:
    """Run a task and wait for it (options: those of `start`)."""
    return start(task, args, **options).finish()


def _kill_tree(proc: subprocess.Popen) -> None:
    """SIGTERM torchrun and every process under it, then SIGKILL what is left after 5 s."""
    kill_tree(proc.pid, grace_s=5)
    proc.wait()
