"""The grading protocol that check cells and the grader share: no torch, imported by both.

A check cell emits one display output of mimetype MIME whose JSON has RESULT_FIELDS; the
grader reads nothing else. Statuses are the spec's; a check cell is found by its nbgrader
metadata or by CHECK_MARKER on its first line (the marker survives Colab, which drops
metadata).
"""

from __future__ import annotations

import re

MIME = "application/vnd.course-check+json"

PASSED = "passed"
FAILED = "failed"
NOT_ATTEMPTED = "not-attempted"
ERROR = "error"
TIMEOUT = "timeout"
MISSING = "missing"
NOT_APPLICABLE = "not-applicable"
STATUSES = (PASSED, FAILED, NOT_ATTEMPTED, ERROR, TIMEOUT, MISSING, NOT_APPLICABLE)

# The keys of a check cell's JSON result (CheckResult.to_dict()).
RESULT_FIELDS = (
    "check_id",
    "status",
    "points",
    "max_points",
    "device_class",
    "message",
    "hint",
    "value",
    "threshold",
    "parts",
    "unit",
    "better",
)
# `better`: how a value compares with its threshold: "higher" (at least), "lower" (at most),
# "" (a target or an exact answer: the message says how close)
BETTER = ("higher", "lower", "")
# grades.csv, one row per submission x check, in this order.
GRADE_COLUMNS = (
    "submission",
    "notebook",
    "check",
    "status",
    "points",
    "max_points",
    "value",
    "threshold",
    "device_class",
    "message",
)

BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"
STUB = ("# YOUR CODE HERE", "raise NotImplementedError()")
CHECK_MARKER = re.compile(
    r"^#\s*\[course-check\]\s+(?P<id>\S+)(?:\s+\((?P<points>[\d.]+) points?\))?", re.MULTILINE
)
ID_PATTERN = re.compile(r"^[A-Za-z0-9_-]+$")

# A notebook's headline effect (course_utils.effects.Effect.to_dict()), read by `course report`.
EFFECT_MIME = "application/vnd.course-effect+json"
