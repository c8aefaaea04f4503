"""Each learner notebook, untouched and half solved, opened in real JupyterLab in headless Chromium and Run All:
every code cell runs and none shows an error (scripts/learner_browser_check.py).

Opt-in, minutes per notebook: COURSE_TESTS=browser pytest tests/test_browser.py [-k 09].
Needs the shared jupyterlab-check tool beside the repo (its setup.sh once: chromium and
playwright-core); skipped with the reason when it or chromium is missing. The kernel gets no
$PYTEST_VERSION or $COURSE_QUICK (the script removes them): it runs as a learner's would, auto
mode and not-attempted checks that do not stop the run included.
"""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "jupyterlab-check"
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
RUN_ALL_S = 1800  # the script's limit for Run All; pytest's adds startup and a margin


def browser_check():
    """scripts/learner_browser_check.py as a module (scripts/ is not a package)."""
    if str(ROOT / "scripts") not in sys.path:
        sys.path.insert(0, str(ROOT / "scripts"))
    return importlib.import_module("learner_browser_check")


def skip_reason() -> str:
    if os.environ.get("COURSE_TESTS") != "browser":
        return "browser tests are opt-in: COURSE_TESTS=browser"
    if not (SHARED / "run.sh").is_file():
        return f"{SHARED} not found (the shared jupyterlab-check tool)"
    return browser_check().missing_tools(browser_check().default_venv())


@pytest.mark.timeout(RUN_ALL_S + 900)
@pytest.mark.parametrize("half_solved", [False, True], ids=["untouched", "half-solved"])
@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_run_all_in_jupyterlab(notebook, half_solved, tmp_path):
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    run = browser_check().check_notebook(
        notebook, out_dir=tmp_path, timeout=RUN_ALL_S, half_solved=half_solved
    )
    seen = f"{run.summary_line or run.failure}; {run.mode_line}; artifacts in {run.artifacts}"
    assert not run.errors, f"error outputs: {run.errors} ({seen})"
    assert run.complete and not run.timed_out, f"not every cell ran ({seen})"
