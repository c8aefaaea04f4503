"""Fake self-test items (Item.target): each runs in a child process of `course selftest`.

Each one that runs appends its name to $COURSE_FAKE_LOG, so tests can tell what ran."""

from __future__ import annotations

import os
import signal
import sys
import time

BLOCKED = ("nbformat", "nbclient", "papermill")


def _ran(name: str) -> None:
    with open(os.environ["COURSE_FAKE_LOG"], "a") as f:
        f.write(name + "\n")


def passes() -> dict:
    _ran("passes")
    return {"status": "passed", "result": {"value": 1.0, "threshold": 1.0, "parts": []}}


def passes_too() -> dict:
    _ran("passes_too")
    return {"status": "passed", "result": {}}


def hangs() -> dict:
    _ran("hangs")
    time.sleep(600)
    return {"status": "passed"}


def crashes() -> dict:
    _ran("crashes")
    print("about to die", flush=True)
    os.kill(os.getpid(), signal.SIGKILL)  # as a segfault or a dead CUDA context would end it
    return {"status": "passed"}


def raises() -> dict:
    _ran("raises")
    raise RuntimeError("CUDA error: an illegal memory access was encountered")


def effect() -> dict:
    from course_utils.effects import effect as record

    _ran("effect")
    result = record("a fake technique", baseline=2.0, improved=1.0, show=False)
    return {"status": "measured", "result": result.to_dict()}


def notebook_stack_loaded() -> dict:
    """Passes only if no module of the notebook stack was imported in this process."""
    _ran("notebook_stack_loaded")
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
    return {"status": "failed" if loaded else "passed", "detail": f"loaded: {loaded}"}
