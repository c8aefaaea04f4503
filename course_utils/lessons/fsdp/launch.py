"""Run one of this lesson's torchrun entry points (worker.py) from a notebook, with a deadline.

The launch is course_utils/launch_result.py's (itself on course_utils/launch.py: a free port, a
line per rank as it starts, a deadline, one retry of a failed rendezvous, the failing rank's
own stderr); lesson 13 only names its worker module.
"""

from __future__ import annotations

from ...launch_result import LEARNER_ENV, Launch, Running, backend_for, describe
from ...launch_result import start as _start

WORKER = "course_utils.lessons.fsdp.worker"
__all__ = ["LEARNER_ENV", "Launch", "Running", "backend_for", "describe", "start", "torchrun"]


def start(task: str, args: list = (), **options) -> Running:
    """Start `worker.py <task>` on `nproc` processes (options: launch_result.start's)."""
    return _start(WORKER, task, args, **options)


def torchrun(task: str, args: list = (), **options) -> Launch:
    """Run a task and wait for it (options: those of `start`)."""
    return start(task, args, **options).finish()
