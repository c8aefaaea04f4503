"""Run a check as a black box, the way its notebook cell does, and judge its verdict.

The red team of notebooks 00-03 wrote these cases from the notebooks alone: each is learner
code, the verdict it deserves and, for a wrong answer, the cause the message must name and the
causes it must not name.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from unittest import mock

import pytest

from course_utils import checks
from course_utils.errors import CheckFailed
from course_utils.protocol import ERROR, FAILED, PASSED


@dataclass(frozen=True)
class Verdict:
    status: str
    message: str  # the failed parts' messages (all of it when there are no failed parts)


def run_check(check, *args) -> Verdict:
    """Run a check cell's call; its verdict as emitted, judged on the parts that failed (a
    passing part's text may mention any cause it checked)."""
    emitted = []
    with mock.patch.object(checks, "emit", emitted.append):
        try:
            check(*args)
        except CheckFailed:
            pass
    (result,) = emitted
    failed = [f"{p.name}: {p.message}" for p in result.parts if p.status == FAILED]
    return Verdict(result.status, "; ".join(failed) or result.message)


def assert_verdict(
    verdict: Verdict, expected: str, cause: str | None = None, not_causes: tuple[str, ...] = ()
) -> None:
    """`expected` is "passed" or "failed" (a check that reports the learner's own exception as
    an error counts as failed); `cause` and `not_causes` are regexes, case-insensitive."""
    said = f"{verdict.status}: {verdict.message}"
    if expected == PASSED:
        assert verdict.status == PASSED, f"a valid answer did not pass: {said}"
        return
    assert verdict.status in (FAILED, ERROR), f"a wrong answer was not caught: {said}"
    if cause:
        assert re.search(cause, verdict.message, re.I), f"message does not name {cause!r}: {said}"
    for wrong in not_causes:
        assert not re.search(wrong, verdict.message, re.I), f"message names {wrong!r}: {said}"


FULL = os.environ.get("COURSE_REDTEAM") == "all"


def in_ci(params: list, keep: set[str]) -> list:
    """The cases CI runs for a check whose every call costs seconds (timing, training): those in
    `keep`; the others run with COURSE_REDTEAM=all (their results are in README.md)."""
    skip = pytest.mark.skipif(not FULL, reason="slow red-team case: COURSE_REDTEAM=all runs it")
    return [
        p if p.id in keep else pytest.param(*p.values, marks=[*p.marks, skip], id=p.id)
        for p in params
    ]


def open_holes(params: list, holes: dict[str, str]) -> list:
    """Cases whose hole is not fixed yet: expected to fail (strict, so a fix that closes one
    turns its xfail into a failure that asks to remove the mark)."""
    out = []
    for p in params:
        if p.id in holes:
            mark = pytest.mark.xfail(strict=True, reason=f"open hole: {holes[p.id]}")
            p = pytest.param(*p.values, marks=[*p.marks, mark], id=p.id)
        out.append(p)
    return out
