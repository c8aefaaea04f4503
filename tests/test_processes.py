"""kill_tree stops a process and the children it started in sessions of their own."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil

from course_utils.processes import kill_tree

PARENT = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"],
                         start_new_session=True)
print(child.pid, flush=True)
time.sleep(60)
"""


def _family() -> tuple[subprocess.Popen, psutil.Process]:
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE, text=True)
    child = psutil.Process(int(parent.stdout.readline()))
    return parent, child


def _gone(proc: psutil.Process) -> bool:
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_kill_tree_stops_a_child_in_its_own_session_at_once():
    parent, child = _family()
    started = time.monotonic()
    kill_tree(parent.pid)
    parent.wait(timeout=10)
    assert _gone(child) and time.monotonic() - started < 5


def test_kill_tree_with_a_grace_period_terminates_first():
    parent, child = _family()
    started = time.monotonic()
    kill_tree(parent.pid, grace_s=5)
    parent.wait(timeout=10)
    assert _gone(child)
    assert time.monotonic() - started < 4  # SIGTERM was enough: the 5 s to SIGKILL not spent


def test_kill_tree_of_a_process_already_gone_does_nothing():
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    done.wait()
    kill_tree(done.pid)
