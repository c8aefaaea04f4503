"""What every lesson's check tests need: run a check that must not pass, and a stub answer."""

from __future__ import annotations

import pytest

from course_utils.errors import CheckFailed


def failure(check, *answers) -> CheckFailed:
    """The CheckFailed that `check(*answers)` raises (the test fails if it passes)."""
    with pytest.raises(CheckFailed) as info:
        check(*answers)
    return info.value


def fails(check, *answers) -> str:
    """The status of a check that must not pass: failed, error or not-attempted."""
    return failure(check, *answers).status


def status_of(check, *answers) -> str:
    """The status of a check, passing or not."""
    try:
        return check(*answers).status
    except CheckFailed as exc:
        return exc.status


def not_attempted(*args, **kwargs):
    """An exercise left as the learner copy has it."""
    raise NotImplementedError()
