"""A torchrun launch of a lesson's worker module whose rank 0 writes one JSON result.

The launching is course_utils/launch.py's (a free port, a line per rank as it starts, a
deadline that kills every process, one retry of a failed rendezvous, the failing rank's own
stderr). A lesson that measures on several processes needs from a launch only its exit code,
its output and the result rank 0 writes: `start("course_utils.lessons.x.worker", "task",
[...])` runs `python -m <module> task ... --out R.json` on every rank, `finish()` reads R.json.
Lessons 13 and 16 launch through this (lesson 13 by course_utils/lessons/fsdp/launch.py).
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from . import launch as harness

LEARNER_ENV = "COURSE_LEARNER_RUN"  # set while a check runs the learner's code


@dataclass
class Launch:
    """What one launch did: exit code (None: killed at the deadline), time, output, result."""

    returncode: int | None
    seconds: float
    timeout_s: float
    output: str
    result: dict | None
    finished: harness.Finished | None = None  # the harness's record: each failed rank's stderr

    @property
    def timed_out(self) -> bool:
        return self.returncode is None

    def tail(self, lines: int = 12) -> str:
        return "\n".join(self.output.strip().splitlines()[-lines:])

    def failure(self, what: str) -> str:
        """One paragraph for a launch that timed out or wrote no result: the failing rank's
        own error (the end of its stderr, or the signal that killed it)."""
        if self.timed_out:
            return (
                f"{what} did not finish within {self.timeout_s:.0f} s, so every process was "
                "killed (a rank that waits forever sits in a collective another rank never "
                "reaches). Last output:\n" + self.tail()
            )
        own = self.finished.rank_error() if self.finished is not None else ""
        said = own[:1].upper() + own[1:] if own else "Last output:\n" + self.tail()
        return f"{what} exited with code {self.returncode} and no result. {said}"


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
    """A launch under way (`start`); `finish()` waits for it, up to its deadline."""

    def __init__(self, module: str, task: str, args, nproc: int, timeout_s: float, learner: bool):
        self._folder = tempfile.TemporaryDirectory(prefix="course-launch-")
        self.out = Path(self._folder.name) / "result.json"
        target = ["-m", module, task, *map(str, args)]
        self._job = harness.Torchrun(
            [*target, "--out", str(self.out)],
            nproc=nproc,
            timeout_s=timeout_s,
            env={LEARNER_ENV: "1"} if learner else None,
            on_retry=lambda: self.out.unlink(missing_ok=True),
        )

    def kill(self) -> None:
        """Stop it now (a measurement beside it failed), and remove its files."""
        self._job.kill()
        self._folder.cleanup()

    def finish(self) -> Launch:
        try:
            done = self._job.finish()
        except BaseException:  # an interrupted cell: the harness killed the ranks
            self._folder.cleanup()
            raise
        result = json.loads(self.out.read_text()) if self.out.exists() else None
        self._folder.cleanup()
        return Launch(done.returncode, done.seconds, done.timeout_s, done.output, result, done)


def start(
    module: str,
    task: str,
    args: list = (),
    *,
    nproc: int = 2,
    timeout_s: float = 180,
    learner: bool = False,
) -> Running:
    """Start `python -m <module> <task> <args> --out R.json` on `nproc` processes; rank 0
    writes the result as JSON to a file that `finish()` reads back."""
    return Running(module, task, args, nproc, timeout_s, learner)
