"""Shared test setup: the offline data set, quick mode, and no state leaking between tests.

Tests never download: COURSE_DATASET=offline. Workloads are small: COURSE_QUICK=1. Both are
set in os.environ when pytest loads this file, so that processes the tests start (spawned
DataLoader workers, notebook kernels) inherit them, and again per test, in case a test
changed them.
"""

from __future__ import annotations

import os

import pytest
import torch

os.environ["COURSE_DATASET"] = "offline"
os.environ["COURSE_QUICK"] = "1"


@pytest.fixture(autouse=True)
def course_env(monkeypatch):
    """Offline data and quick mode for every test; torch's thread count and the forced quick
    mode are put back afterwards."""
    from course_utils import mode

    monkeypatch.setenv("COURSE_DATASET", "offline")
    monkeypatch.setenv("COURSE_QUICK", "1")
    mode.set_quick(None)
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)
    mode.set_quick(None)


@pytest.fixture
def one_thread():
    """torch on one thread for this test (restored by `course_env`).

    On a 2-core machine shared with other jobs, a single-threaded kernel is timed far more
    steadily than one that needs both cores at once.
    """
    torch.set_num_threads(1)
    return 1
