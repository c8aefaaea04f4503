"""The solution notebooks run top to bottom in quick mode (nbval), and notebooks/ is what
`course assign` makes of solutions/.

CI runs the solutions of NBVAL_IN_CI checks-only (its demo cells emptied, as `course grade
--checks-only` does): the solution's answers must pass their checks. The demos run in CI too, in
tests/test_learner_path.py's untouched learner copies, where they use the reference answers;
COURSE_TESTS=all runs every solution whole, demos on the solution's own answers.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from course_utils.authoring import assign, read, write
from course_utils.grading.demos import skip_demos

ROOT = Path(__file__).resolve().parents[1]
ALL = os.environ.get("COURSE_TESTS") == "all"
# CI runs these solutions through nbval (the lesson tests run every check on its reference
# answers, and test_learner_path every learner copy top to bottom); COURSE_TESTS=all runs all
NBVAL_IN_CI = ("08_gradient_clipping", "09_no_bias_before_bn")
SOLUTIONS = [
    p for p in sorted((ROOT / "solutions").glob("*.ipynb")) if ALL or p.stem in NBVAL_IN_CI
]
# Two notebooks run at a time: every notebook's checks are built to pass beside one busy
# process (docs/authoring.md), and nbval passed for each at load 9-15 while the helpers of the
# last session worked beside it; two at a time keeps `.ci/run` inside its 20 minutes.
AT_ONCE = 2
# the longest first (seconds in CI's log), so the last notebook does not run alone
LONGEST = ("11_capstone", "01_one_cycle", "10_habits", "06_ddp", "02_batch_size", "03_data_loading")


def test_notebooks_are_in_sync_with_solutions():
    stale = assign(ROOT / "solutions", ROOT / "notebooks", check=True)
    assert not stale, f"run `course assign`: out of date: {stale}"


def _checks_only(notebook: Path, folder: Path) -> Path:
    """A copy of the solution in `folder` with its demo cells emptied (cells stay in place)."""
    solution = read(notebook)
    nb, _ = skip_demos(copy.deepcopy(solution), solution)
    path = folder / notebook.name
    write(nb, path)
    return path


def _nbval(notebook: Path, folder: Path) -> subprocess.CompletedProcess:
    if not ALL:
        notebook = _checks_only(notebook, folder)
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
        str(folder),
    ]
    return subprocess.run(cmd, env=env, cwd=folder, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def nbval_runs(request, tmp_path_factory):
    """{notebook name: its nbval run}, started AT_ONCE at a time for the notebooks selected."""
    chosen = [
        item.callspec.params["notebook"]
        for item in request.session.items
        if item.originalname == "test_solution_notebook_runs_and_passes_its_checks_in_quick_mode"
    ]
    chosen.sort(key=lambda nb: LONGEST.index(nb.stem) if nb.stem in LONGEST else len(LONGEST))
    with ThreadPoolExecutor(max_workers=AT_ONCE) as pool:
        runs: dict[str, Future] = {
            nb.name: pool.submit(_nbval, nb, tmp_path_factory.mktemp(nb.stem)) for nb in chosen
        }
        yield runs
        for future in runs.values():
            future.cancel()


@pytest.mark.parametrize("notebook", SOLUTIONS, ids=[p.stem for p in SOLUTIONS])
def test_solution_notebook_runs_and_passes_its_checks_in_quick_mode(notebook, nbval_runs):
    run = nbval_runs[notebook.name].result()
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
