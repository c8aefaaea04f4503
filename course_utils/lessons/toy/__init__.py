"""A two-exercise lesson for checking the grader itself: each check asks one plain function
for one number, so grading it costs little more than a kernel start. The grader's tests
(tests/grading_fixtures.py) grade it in every scenario, from one machine to a Dask cluster and
Gradescope. It has no notebook in solutions/: the tests make theirs."""

from .checks import THRESHOLDS, check_double, check_square

__all__ = ["THRESHOLDS", "check_double", "check_square"]
