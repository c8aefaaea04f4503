"""The solution notebooks run top to bottom in quick mode (nbval), and notebooks/ is what
`course assign` makes of solutions/."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from course_utils.authoring import assign

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = sorted((ROOT / "solutions").glob("*.ipynb"))


def test_notebooks_are_in_sync_with_solutions():
    stale = assign(ROOT / "solutions", ROOT / "notebooks", check=True)
    assert not stale, f"run `course assign`: out of date: {stale}"


@pytest.mark.parametrize("notebook", SOLUTIONS, ids=[p.stem for p in SOLUTIONS])
def test_solution_notebook_runs_and_passes_its_checks_in_quick_mode(notebook, tmp_path):
    env = {**os.environ, "COURSE_QUICK": "1", "COURSE_DATASET": "offline", "MPLBACKEND": "Agg"}
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "--nbval-lax",
        str(notebook),
        "-q",
        "-p",
        "no:cacheprovider",
        "--rootdir",
        str(tmp_path),
    ]
    run = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
