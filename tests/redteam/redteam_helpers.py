"""Shared by every red-team file: run a check as a black box, the way its notebook cell calls
it, and judge the verdict on the parts that did not pass.

The red teams wrote their cases from the notebooks alone: learner code, the verdict it
deserves and, for a wrong answer, the cause the message must name and the causes it must not
name. What a passing part says is not a diagnosis, so causes are looked for in the failing
parts only. Assertion messages start with NOT CAUGHT, VALID FAILED or WRONG MESSAGE, so a
run's failures can be tallied per kind.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

import pytest

from course_utils import checks
from course_utils.protocol import ERROR, FAILED, NOT_APPLICABLE, PASSED

FULL = os.environ.get("COURSE_REDTEAM") == "all"
SLOW = pytest.mark.skipif(  # 04-07's slow cases; 00-03 use in_ci and COURSE_REDTEAM=all
    os.environ.get("COURSE_REDTEAM_SLOW") != "1",
    reason="a timed or torchrun case (10-30 s on a loaded 2-core machine), outside CI's "
    "budget: COURSE_REDTEAM_SLOW=1 runs it",
)


def grade(check, *args):
    """The CheckResult that `check(*args)` emits (the check raises when it does not pass)."""
    seen = []
    emit, checks.emit = checks.emit, seen.append
    try:
        check(*args)
    except Exception:  # CheckFailed: the verdict is in the emitted result
        if not seen:
            raise
    finally:
        checks.emit = emit
    return seen[-1]


def blame(result) -> str:
    """What the learner is told is wrong: the parts that did not pass."""
    failing = [
        f"{p.name}: {p.message}" for p in result.parts if p.status not in (PASSED, NOT_APPLICABLE)
    ]
    return " | ".join(failing) if failing else result.message


@dataclass(frozen=True)
class Verdict:
    status: str
    message: str  # the check's whole message
    failing: str  # what the failing parts say (the whole message when there are no parts)


def run_check(check, *args) -> Verdict:
    result = grade(check, *args)
    return Verdict(result.status, result.message, blame(result))


def assert_verdict(
    verdict: Verdict, expected: str, cause: str | None = None, not_causes: tuple[str, ...] = ()
) -> None:
    """`expected` is "passed" or "failed" (the learner's own exception, reported as an error,
    counts as failed); `cause` must and `not_causes` must not be named by a failing part
    (case-insensitive regexes)."""
    said = f"{verdict.status}: {verdict.failing}"
    if expected == PASSED:
        assert verdict.status == PASSED, f"VALID FAILED: {said}"
        return
    assert verdict.status in (FAILED, ERROR), f"NOT CAUGHT: {said}"
    if cause:
        assert re.search(cause, verdict.failing, re.I), f"WRONG MESSAGE (no {cause!r}): {said}"
    for wrong in not_causes:
        assert not re.search(wrong, verdict.failing, re.I), f"WRONG MESSAGE ({wrong!r}): {said}"


def assert_graded(result, expect: str, names: str | None, not_names: str | None) -> None:
    """The same judgement on a CheckResult from `grade`, for cases built with `case`."""
    verdict = Verdict(result.status, result.message, blame(result))
    assert_verdict(verdict, expect, names, (not_names,) if not_names else ())


def case(fn, expect="failed", names=None, not_names=None):
    """A parametrised case named for its function: valid_x -> valid-x, wrong_x -> wrong-x."""
    kind = "valid" if fn.__name__.startswith("valid_") else "wrong"
    return pytest.param(fn, expect, names, not_names, id=f"{kind}-{fn.__name__[6:]}")


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
