"""Shared by the red-team files of 08-10: grade a learner function the way its check cell
does, and judge the verdict on the parts that did not pass."""

from __future__ import annotations

import re

import pytest

from course_utils import checks


def grade(check, fn):
    """The CheckResult that `check(fn)` emits (the check raises when it does not pass)."""
    seen = []
    emit, checks.emit = checks.emit, seen.append
    try:
        check(fn)
    except Exception:  # CheckFailed: the verdict is in the emitted result
        pass
    finally:
        checks.emit = emit
    return seen[-1]


def blame(result) -> str:
    """What the learner is told is wrong: the parts that did not pass."""
    failing = [
        f"{p.name}: {p.message}"
        for p in result.parts
        if p.status not in ("passed", "not-applicable")
    ]
    return " | ".join(failing) if failing else result.message


def assert_verdict(result, expect: str, names: str | None, not_names: str | None) -> None:
    """`expect` is "passed" or "failed"; a wrong answer may also fail as an error, if the
    message then names its cause."""
    said = blame(result)
    got = "failed" if result.status == "error" else result.status
    assert got == expect, f"expected {expect}, got {result.status}: {result.message}"
    if names:
        assert re.search(names, said, re.I), f"message does not name /{names}/: {said}"
    if not_names:
        assert not re.search(not_names, said, re.I), f"message names /{not_names}/: {said}"


def case(fn, expect="failed", names=None, not_names=None):
    kind = "valid" if fn.__name__.startswith("valid_") else "wrong"
    return pytest.param(fn, expect, names, not_names, id=f"{kind}-{fn.__name__[6:]}")
