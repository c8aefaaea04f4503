"""Which answer a demo runs: the learner's once a check has passed it, else the reference.

The check decides, not a probe of the learner's code: a stub that happens not to raise on some
input is still unsolved, and an answer redefined after its check is unchecked until the check
runs again. `course_utils.checks` records each verdict here and re-exports
`learner_or_reference`, which notebooks call as `cu.checks.learner_or_reference`.
"""

from __future__ import annotations

from .protocol import NOT_APPLICABLE, NOT_ATTEMPTED, PASSED

_verdicts: dict[int, tuple[object, str]] = {}  # id(answer) -> (answer, its last check's status)


def record(answers: list, status: str) -> None:
    """Remember the verdict of each function or class a check was given (kept alive, so an
    id is never reused by another object)."""
    for answer in answers:
        if callable(answer):
            _verdicts[id(answer)] = (answer, status)


def verdict_of(answer) -> str | None:
    """The status of the last check run on this very object in this kernel, or None."""
    kept = _verdicts.get(id(answer))
    return kept[1] if kept is not None and kept[0] is answer else None


def learner_or_reference(answer, reference, what: str):
    """`answer` if a check passed it in this kernel, else `reference`, saying why.

    The check decides, not a probe: a stub that happens not to raise on some input is still
    unsolved, and an answer redefined after its check is unchecked until the check runs again.
    Works for functions and classes alike (the chosen object itself is returned)."""
    status = verdict_of(answer)
    if status in (PASSED, NOT_APPLICABLE):
        return answer
    why = {
        None: "has not been through its check yet (run the check cell below it)",
        NOT_ATTEMPTED: "is not written yet",
    }.get(status, f"has not passed its check yet ({status})")
    print(f"({what} {why}: {USES_REFERENCE}.)")
    return reference


USES_REFERENCE = "this demo uses the lesson's reference answer"
