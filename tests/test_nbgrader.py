"""nbgrader can use solutions/ as its source: its own generate_assignment preprocessors accept
every solution notebook and produce our learner copy's code. Skipped without nbgrader."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest

from course_utils.authoring import learner_copy, normalised, read

preprocessors = pytest.importorskip("nbgrader.preprocessors")

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = sorted((ROOT / "solutions").glob("*.ipynb"))

# generate_assignment's order, less the steps that need nbgrader's database or a course folder
# (IncludeHeaderFooter, InstantiateTests, SaveCells)
GENERATE_ASSIGNMENT = [
    preprocessors.LockCells,
    preprocessors.ClearSolutions,
    preprocessors.ClearOutput,
    preprocessors.CheckCellMetadata,
    preprocessors.ComputeChecksums,
    preprocessors.ClearHiddenTests,
    preprocessors.ClearMarkScheme,
    preprocessors.ComputeChecksums,
    preprocessors.CheckCellMetadata,
]


def nbgrader_release(nb):
    nb, resources = copy.deepcopy(nb), {}
    for step in GENERATE_ASSIGNMENT:
        nb, resources = step().preprocess(nb, resources)
    return nb


@pytest.mark.parametrize("path", SOLUTIONS, ids=[p.stem for p in SOLUTIONS])
def test_nbgrader_makes_our_learner_copy_from_the_committed_solution(path):
    source = read(path)
    assert source == normalised(source, path.name), "run `course assign` to complete its metadata"
    released = nbgrader_release(source)
    ours = learner_copy(source, path.name)
    assert [c.source for c in released.cells] == [c.source for c in ours.cells]
    graded = [c for c in released.cells if c.metadata.get("nbgrader", {}).get("grade")]
    assert graded and all(c.metadata["nbgrader"]["locked"] for c in graded)
