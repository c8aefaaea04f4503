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


@pytest.fixture(scope="session")
def toy_graded(tmp_path_factory):
    """The toy lesson's scenario submissions (tests/grading_fixtures.py) graded once on this
    machine, two at a time, shared by test_grading, test_cluster and test_shards. `files`
    holds the bytes written, taken before any test grades into the same folder again."""
    import csv
    import hashlib

    from grading_fixtures import CELL_TIMEOUT, make_course, snapshot

    from course_utils.grading import grade

    root = tmp_path_factory.mktemp("course")
    solutions, subs = make_course(root)
    before = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in subs.iterdir()}
    summary = grade(
        [subs], out=root / "out", solutions=solutions, cell_timeout=CELL_TIMEOUT, jobs=2
    )
    with open(root / "out" / "grades.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return {
        "root": root,
        "subs": subs,
        "solutions": solutions,
        "summary": summary,
        "rows": rows,
        "before": before,
        "files": snapshot(root / "out"),
    }
