"""Which answer a demo runs: the learner's once a check has passed it, else the reference.

The check decides, not a probe of the learner's code: a stub that happens not to raise on some
input is still unsolved, and an answer redefined after its check is unchecked until the check
runs again. `course_utils.checks` records each verdict here and re-exports
`learner_or_reference`, which notebooks call as `cu.checks.learner_or_reference`.

In the learner edition (`course release`) each reference answer is a `withheld` placeholder:
a demo whose answer has not passed its check then stops, saying why (ReferenceWithheld), as
there is no reference to run instead.
"""

from __future__ import annotations

from .errors import ReferenceWithheld
from .protocol import NOT_APPLICABLE, NOT_ATTEMPTED, PASSED

WITHHELD = "withheld"  # the verdict of a check that needed a reference the edition leaves out

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
    if is_withheld(reference):
        raise ReferenceWithheld(reference.__name__, _no_reference(what, status))
    why = {
        None: "has not been through its check yet (run the check cell below it)",
        NOT_ATTEMPTED: "is not written yet",
    }.get(status, f"has not passed its check yet ({status})")
    print(f"({what} {why}: {USES_REFERENCE}.)")
    return reference


USES_REFERENCE = "this demo uses the lesson's reference answer"


class Withheld:
    """What the learner edition has in place of a reference answer: calling it (or building
    it, for a class) raises ReferenceWithheld. `is_reference`: a check never guards it as
    the learner's code."""

    is_reference = True

    def __init__(self, name: str, why: str = ""):
        self.__name__ = self.__qualname__ = name
        self.why = why

    def __call__(self, *args, **kwargs):
        raise ReferenceWithheld(self.__name__, f"`{self.__name__}` {self.why}" if self.why else "")

    def __repr__(self) -> str:
        return f"<{self.__name__}: a reference answer the learner edition leaves out>"


_withheld: list[str] = []  # names of the placeholders made in this process


def withheld(name: str, why: str = "") -> Withheld:
    """The placeholder `course release` writes for the reference answer `name` (and the
    grading kernel's harness for a harness function that computes an answer: `why` says so)."""
    _withheld.append(name)
    return Withheld(name, why)


def withheld_names() -> list[str]:
    """The reference answers this edition leaves out, among the modules imported so far."""
    return list(_withheld)


def is_withheld(obj) -> bool:
    return isinstance(obj, Withheld)


def _no_reference(what: str, status: str | None) -> str:
    """Why a demo stops in the learner edition, in one line."""
    if status == WITHHELD:
        return (
            f"this demo needs a checked `{what}`, and its check needs the lesson's reference "
            "answer, which the learner edition leaves out (your instructor grades it)"
        )
    return (
        f"this demo needs your `{what}` to pass its check first; the learner edition has no "
        "reference answer to show meanwhile"
    )
