"""CI's tier (tests/conftest.py) names tests by their node id: a renamed or moved test would
silently run again in CI, or a mistyped name would leave a slow test in. Each name must be a
test function defined in the file it names."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from conftest import FIRST_CASE_ONLY, LONG_TIER

ROOT = Path(__file__).resolve().parents[1]


def _functions(path: Path) -> dict[str, ast.FunctionDef]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}


@pytest.mark.parametrize("node_id", sorted({*FIRST_CASE_ONLY, *LONG_TIER}))
def test_every_tiered_test_exists_where_the_tier_says(node_id):
    file, _, function = node_id.partition("::")
    assert (ROOT / file).exists(), f"{node_id}: no such file"
    assert function in _functions(ROOT / file), f"{node_id}: no such test function"


@pytest.mark.parametrize("node_id", sorted(FIRST_CASE_ONLY))
def test_first_case_only_names_parametrized_tests(node_id):
    """The rule skips cases after the first: on a test without cases it would do nothing."""
    file, _, function = node_id.partition("::")
    decorators = _functions(ROOT / file)[function].decorator_list
    assert any("parametrize" in ast.unparse(d) for d in decorators), node_id


def test_every_learner_copy_left_out_of_the_learner_path_has_its_checks_graded_in_ci():
    """A copy test_learner_path leaves to COURSE_TESTS=all still has its untouched checks
    graded in CI (test_grading_course), but 00, whose solution test_book's real report runs."""
    from test_grading_course import IN_CI
    from test_learner_path import LEFT_TO_ALL

    assert set(LEFT_TO_ALL) - {"00_measuring"} <= set(IN_CI)
