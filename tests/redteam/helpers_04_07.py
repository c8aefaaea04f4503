"""Run a check as a black box, the way its notebook cell calls it, and judge the verdict.

The red team of notebooks 04-07 wrote these cases from the notebooks alone: each is learner
code, the verdict it deserves and, for a wrong answer, the cause the message must name and
the causes it must not name. The assertion messages start with NOT CAUGHT, VALID FAILED or
WRONG MESSAGE, so a run's failures can be tallied per kind.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
from dataclasses import dataclass

import pytest

from course_utils.errors import CheckFailed
from course_utils.protocol import ERROR, FAILED, PASSED

SLOW = pytest.mark.skipif(
    os.environ.get("COURSE_REDTEAM_SLOW") != "1",
    reason="a timed or torchrun case (10-30 s on a loaded 2-core machine), outside CI's "
    "budget: COURSE_REDTEAM_SLOW=1 runs it",
)


@dataclass(frozen=True)
class Verdict:
    status: str
    message: str  # the whole message
    failing: str  # what the failing parts say (the whole message when there are no parts)


def run_check(check, *args) -> Verdict:
    """The check's status and messages (without its hint), read from what it prints."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            result = check(*args)
            status, message = result.status, result.message
        except CheckFailed as failed:
            status, message = failed.status, failed.summary
    parts = [line.strip() for line in out.getvalue().splitlines() if line.startswith("   ")]
    failing = [part[2:] for part in parts if part.startswith(FAILED_ICONS)]
    return Verdict(status, message, "; ".join(failing) or message)


FAILED_ICONS = ("\u274c", "\U0001f4a5")  # the check's icons for failed parts and errors


def assert_verdict(
    verdict: Verdict, expected: str, cause: str | None = None, not_causes: tuple[str, ...] = ()
) -> None:
    """`expected` is "passed" or "failed" (the learner's own exception, reported as an error,
    counts as failed); `cause` must and `not_causes` must not be named by a failing part
    (case-insensitive regexes): what passing parts say is not a diagnosis."""
    said = f"{verdict.status}: {verdict.message}"
    if expected == PASSED:
        assert verdict.status == PASSED, f"VALID FAILED: {said}"
        return
    assert verdict.status in (FAILED, ERROR), f"NOT CAUGHT: {said}"
    if cause:
        assert re.search(cause, verdict.failing, re.I), f"WRONG MESSAGE (no {cause!r}): {said}"
    for wrong in not_causes:
        assert not re.search(wrong, verdict.failing, re.I), f"WRONG MESSAGE ({wrong!r}): {said}"
