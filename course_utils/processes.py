"""Stopping a process and everything it started.

torchrun starts each worker, and Jupyter each kernel, in a session of its own, so killing a
process group misses them: the tree is collected first and every member signalled. Used by
the grader, the selftest runner and the torchrun launcher (launch.py).
"""

from __future__ import annotations

import contextlib

import psutil


def kill_tree(pid: int, grace_s: float = 0.0, wait_s: float = 10.0) -> None:
    """Stop process `pid` and all its descendants. With `grace_s`, SIGTERM first (a torchrun
    worker then leaves its process group cleanly) and SIGKILL whatever is left after it;
    then wait up to `wait_s` for every member to be gone."""
    try:
        parent = psutil.Process(pid)
        family = [parent, *parent.children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    alive = family
    if grace_s > 0:
        for p in family:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.terminate()
        _, alive = psutil.wait_procs(family, timeout=grace_s)
    for p in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    psutil.wait_procs(alive, timeout=wait_s)
