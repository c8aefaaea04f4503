"""The graded-check API that locked check cells call.

A check is a function decorated with `@check(id, points, hint)` that measures the learner's
code and returns its parts (`correct(...)`, `at_least(...)`, `not_applicable(...)`). Its body
never calls the learner's code itself: it receives each function or class the cell passed as
an answer and runs it through probes (course_utils.probes), so the same body decides the
verdict in the learner's notebook and, under `course grade`, in a judge process the learner's
code cannot reach (course_utils.judged, course_utils.grading.judge).

The decorator turns the outcome into one CheckResult: it prints a verdict a beginner can read,
emits the structured result (mimetype MIME) for the notebook, and raises CheckFailed for a
failure, so nbval marks the cell (a not-attempted check raises only under a test runner:
`stops_the_run`). Each verdict is recorded in `answers`, whose `learner_or_reference` lets
demos use the learner's answer once its check passed it.

Every check is registered by its id in REGISTRY (the `grade_id` of its locked cell). A
lesson's reference answers are marked `@reference`: in a notebook, where they exist, a probe
that runs the learner's code into one raises ReferenceUsed, and the check fails saying so.
The grading kernel has none (course_utils.grading.kernel_harness). Functions that read a
held-out split are marked `@held_out` and guarded the same way (HeldOutUsed).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass

from . import judged, probes
from .answers import USES_REFERENCE, WITHHELD, learner_or_reference, record, verdict_of
from .device import DEVICE_CLASSES, device_class
from .errors import CheckFailed, ReferenceUsed, ReferenceWithheld
from .guards import _guard, held_out, held_out_reads, reference
from .probes import LearnerRaised, SessionLost, learner_frame
from .protocol import ERROR, FAILED, MIME, NOT_APPLICABLE, NOT_ATTEMPTED, PASSED
from .verdicts import (  # re-exported: lessons build their parts from course_utils.checks
    CheckResult,
    Part,
    at_least,
    at_most,
    correct,
    not_applicable,
    retry_measure,
)

REGISTRY: dict[str, Callable] = {}  # check id -> the decorated check
__all__ = [  # re-exported: from answers, and from guards (lessons mark their answers here)
    "USES_REFERENCE",
    "CheckResult",
    "Part",
    "at_least",
    "at_most",
    "correct",
    "not_applicable",
    "retry_measure",
    "held_out",
    "held_out_reads",
    "learner_or_reference",
    "reference",
    "verdict_of",
]


@dataclass(frozen=True)
class Threshold:
    """A number a check compares against, with the evidence that sized it (what was measured,
    where, how often), so a reader can judge the margin between right and wrong.

    `measured_on`: the device classes (course_utils.device.DEVICE_CLASSES) on which the value
    rests on a measurement made there; empty for a spec, a paper, a definition or reasoning.
    A class not listed was never measured: its verdicts there rest on the evidence alone.
    """

    value: float
    evidence: str
    measured_on: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.measured_on, str):
            raise TypeError(f"measured_on is a tuple of device classes, got {self.measured_on!r}")
        unknown = [c for c in self.measured_on if c not in DEVICE_CLASSES]
        if unknown:
            raise ValueError(
                f"measured_on names unknown device classes {unknown}: {DEVICE_CLASSES}"
            )


def show_limits(thresholds: dict[str, Threshold], *names: str) -> None:
    """Print the limits a check compares against, read from its THRESHOLDS, so exercise text
    names a limit and never types a number the code can change. Only the values: the
    evidence lists measured right and wrong answers, which would give an exercise away."""
    width = max(map(len, names))
    for name in names:
        print(f"{name:>{width}} = {thresholds[name].value:g}")
    print(
        "(each limit's evidence: lesson.THRESHOLDS[name].evidence; it names measured answers, "
        "so read it after your check passes)"
    )


# --- Run All goes on past an exercise not yet written ---------------------------------------


def stops_the_run(status: str) -> bool:
    """Whether a check cell with this verdict raises (marking the cell failed).

    Failed and errored checks always raise. A not-attempted check raises only under a test
    runner, so that `pytest --nbval-lax` counts it: pytest (>= 8.2) sets $PYTEST_VERSION for
    its run, and the kernels nbval starts inherit it; $COURSE_STRICT_CHECKS=1 forces it. In
    JupyterLab or Colab it shows its verdict and Run All goes on to the demos below. Under
    the grader ($COURSE_GRADING=1) no check raises: a result counts only from a check cell
    that completed without an error (course_utils.grading.results)."""
    if status in (PASSED, NOT_APPLICABLE) or os.environ.get("COURSE_GRADING") == "1":
        return False
    if status == NOT_ATTEMPTED:
        return bool(os.environ.get("PYTEST_VERSION") or os.environ.get("COURSE_STRICT_CHECKS"))
    return True


def _summarise(check_id: str, points: float, hint: str, parts: list[Part]) -> CheckResult:
    statuses = {p.status for p in parts}
    if FAILED in statuses:
        status = FAILED
    elif PASSED in statuses:
        status = PASSED
    else:
        status = NOT_APPLICABLE
    main = next((p for p in parts if p.value is not None and p.status != NOT_APPLICABLE), None)
    main = main or next((p for p in parts if p.value is not None), None)
    message = "; ".join(f"{p.name}: {p.message}" for p in parts)
    return CheckResult(
        check_id,
        status,
        points if status == PASSED else 0.0,
        points,
        device_class(),
        message,
        hint,
        main.value if main else None,
        main.threshold if main else None,
        parts,
        main.unit if main else "",
        main.better if main else "",
    )


def emit(result: CheckResult) -> None:
    """Show the verdict and attach the structured result that `course grade` reads."""
    try:
        from IPython import get_ipython
        from IPython.display import display

        if get_ipython() is not None:
            display(
                {MIME: result.to_dict(), "text/plain": result.text(), "text/html": result.html()},
                raw=True,
            )
            return
    except ImportError:
        pass
    print(result.text())


# Checks not yet written with probes (course_utils.probes): their bodies still call the
# learner's code themselves, so they run in the learner's kernel, as before grading v3, and
# `course grade` reads their result from the notebook. Emptied lesson by lesson.
LEGACY: set[str] = {
}  # fmt: skip


def _result(check_id: str, status: str, points: float, message: str, hint: str) -> CheckResult:
    return CheckResult(check_id, status, 0.0, points, device_class(), message, hint)


NOT_ATTEMPTED_MESSAGE = "Not attempted yet: the exercise still raises NotImplementedError."
INSTRUCTOR_GRADES = (
    "graded by your instructor: this self-check needs the lesson's reference answer, which "
    "the learner edition leaves out"
)


def evaluate(
    check_id: str, points: float, hint: str, body: Callable, args: tuple, kwargs: dict
) -> CheckResult:
    """Run a check body on answers (course_utils.probes) and decide its verdict: the same
    code in a notebook and in the judge. The learner's exceptions reach it as LearnerRaised,
    so any other exception is the check's own, about what the learner's code returned.
    Raises SessionLost (the judge only) when the learner's kernel stopped answering."""
    try:
        return _summarise(check_id, points, hint, list(body(*args, **kwargs)))
    except ReferenceWithheld:  # the learner edition: no reference to compare with
        return _result(check_id, NOT_APPLICABLE, points, INSTRUCTOR_GRADES, hint)
    except ReferenceUsed as exc:
        return _result(check_id, FAILED, points, str(exc), hint)
    except NotImplementedError:
        return _result(check_id, NOT_ATTEMPTED, points, NOT_ATTEMPTED_MESSAGE, hint)
    except LearnerRaised as exc:
        return _result(check_id, ERROR, points, f"Y{str(exc)[1:]}", hint)
    except SessionLost:  # the judge's to report: no verdict was reached
        raise
    except Exception as exc:  # the check's own code failed on what the learner's returned
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        message = (
            f"the check could not use what your code returned ({type(exc).__name__}: {first[:300]})"
        )
        return _result(check_id, ERROR, points, message, hint)


def _legacy_result(check_id, points, hint, body, args, kwargs) -> tuple[CheckResult, list]:
    """A check body that calls the learner's code itself (LEGACY), in this kernel."""
    answers = [*args, *kwargs.values()]
    args = tuple(_guard(a) for a in args)
    kwargs = {k: _guard(v) for k, v in kwargs.items()}
    try:
        return _summarise(check_id, points, hint, list(body(*args, **kwargs))), answers
    except ReferenceWithheld:
        return _result(check_id, NOT_APPLICABLE, points, INSTRUCTOR_GRADES, hint), []
    except ReferenceUsed as exc:
        return _result(check_id, FAILED, points, str(exc), hint), answers
    except NotImplementedError:
        return _result(check_id, NOT_ATTEMPTED, points, NOT_ATTEMPTED_MESSAGE, hint), answers
    except Exception as exc:  # the learner's code raised: report it in one line
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        message = f"Your code raised {type(exc).__name__}: {first}{learner_frame(exc)}"
        return _result(check_id, ERROR, points, message, hint), answers


def check(check_id: str, points: float, hint: str = "", in_kernel: str = "") -> Callable:
    """Decorate a check body that returns a list of Parts; see the module docstring.
    `in_kernel`: what of the verdict rests on readings the kernel's own instruments take (a
    counter around the learner's call, a time measured inside a probe), which the judge takes
    as sent; the README lists them. Empty: the judge computes or times everything it compares."""

    def decorate(body: Callable[..., list[Part]]) -> Callable[..., CheckResult]:
        @functools.wraps(body)
        def run(*args, **kwargs) -> CheckResult:
            learner = [*args, *kwargs.values()]
            if check_id in LEGACY:
                result, learner = _legacy_result(check_id, points, hint, body, args, kwargs)
            elif judged.active():  # under `course grade`: the judge decides, outside
                result = judged.judge(check_id, args, kwargs)
            else:
                result = evaluate(check_id, points, hint, body, *probes.answers(args, kwargs))
            if result.status == NOT_APPLICABLE and result.message == INSTRUCTOR_GRADES:
                record(learner, WITHHELD)  # not a pass: demos must not run it as checked
            else:
                record(learner, result.status)
            emit(result)
            if stops_the_run(result.status):
                raise CheckFailed(check_id, result.status, result.message) from None
            return result

        run.check_id, run.points, run.hint, run.body = check_id, points, hint, body
        run.in_kernel = in_kernel
        known = REGISTRY.get(check_id)
        if known is not None and (known.__module__, known.__qualname__) != (
            run.__module__,
            run.__qualname__,
        ):
            raise ValueError(f"check id {check_id!r} is registered twice")
        REGISTRY[check_id] = run
        return run

    return decorate
