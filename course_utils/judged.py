"""The learner's kernel's side of a judged check, under `course grade`.

There the grader starts the kernel with $COURSE_JUDGE, the path of a socket on which a judge
(course_utils.grading.judge) listens, outside the kernel's sandbox. A locked check cell then
does not decide its own verdict. It opens a session for its check id and hands over what the
cell passed (the learner's functions stay here; plain values are sent as data); the judge
runs the check's body and asks for each probe it needs (course_utils.probes), which runs here
on the learner's code; the judge decides and sends back the verdict, which the cell shows.

Nothing the kernel sends can change how the judge compares: it sends data only, and the judge
computes what that data must equal itself. So a rebound `lesson`, a patched display or clock
changes at most what is shown here, never the grade.
"""

from __future__ import annotations

import os
import socket
from typing import Any

from . import wire

JUDGE_ENV = "COURSE_JUDGE"  # the judge's socket, set by the grader for the grading kernel


def active() -> bool:
    return bool(os.environ.get(JUDGE_ENV))


class AnswerRef:
    """What the judge sends in place of an answer: its position among the cell's arguments."""

    def __init__(self, index: int):
        self.index = index


def describe(args: tuple, kwargs: dict) -> tuple[list[dict], list[Any], list[str]]:
    """How the cell's arguments are announced to the judge: one entry each, a callable by
    its name (it stays here), anything else as data; and the kwargs' names, in order."""
    values = [*args, *kwargs.values()]
    specs, data = [], []
    for value in values:
        if callable(value):
            specs.append({"callable": True, "name": str(getattr(value, "__name__", "answer"))})
        else:
            specs.append({"callable": False})
            data.append(value)
    return specs, data, list(kwargs)


def _resolve(value: Any, answers: list) -> Any:
    from .guards import _guard

    if isinstance(value, wire.Record) and value.type_name == "AnswerRef":
        index = value.fields.get("index")
        if isinstance(index, int) and 0 <= index < len(answers):
            return _guard(answers[index])  # run as the learner's code (held-out readers)
        raise wire.WireError(f"no answer {index!r}")
    return value


def _unchanged() -> None:
    """Raise HarnessChanged if the notebook's code rebound the harness's instruments."""
    from .integrity import HarnessChanged, changed

    names = changed()
    if names:
        raise HarnessChanged(names)


def serve(sock: socket.socket, answers: list) -> dict:
    """Answer the judge's probes until it sends the verdict; return the verdict. Before and
    after each probe the harness is compared with its files (course_utils.integrity): a probe
    whose instruments were rebound reports that instead of its readings."""
    from .probes import find_probe, raised

    while True:
        control, value = wire.receive(sock)
        if "verdict" in control:
            return control["verdict"]
        if "refused" in control:
            return control["refused"]
        name = control.get("probe")
        args, kwargs = value if isinstance(value, tuple) and len(value) == 2 else ((), {})
        try:
            _unchanged()
            fn = find_probe(str(name))
            call_args = tuple(_resolve(a, answers) for a in args)
            call_kwargs = {k: _resolve(v, answers) for k, v in kwargs.items()}
            result = fn(*call_args, **call_kwargs)
            _unchanged()
            header, blob = wire.encode(result)  # fails here, not half-sent, if it cannot cross
        except Exception as exc:  # the learner's code (or what it returned) failed
            wire.send(sock, {"raised": raised(exc)})
            continue
        wire.send_encoded(sock, {"result": True}, header, blob)


def judge(check_id: str, args: tuple, kwargs: dict):
    """The verdict of `check_id` on the cell's arguments, decided by the judge."""
    from .checks import CheckResult, device_class
    from .protocol import ERROR

    specs, data, names = describe(args, kwargs)
    answers = [*args, *kwargs.values()]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.connect(os.environ[JUDGE_ENV])
            opening = {"open": check_id, "answers": specs, "kwargs": names}
            wire.send(sock, opening, data, with_value=True)
            verdict = serve(sock, answers)
    except (OSError, EOFError, wire.WireError) as exc:
        message = f"this check could not reach the grader's judge ({type(exc).__name__}: {exc})"
        return CheckResult(check_id, ERROR, 0.0, 0.0, device_class(), message)
    if "check_id" not in verdict:  # refused: not the locked cell of this check, say
        message = str(verdict.get("reason", "the judge refused this check here"))
        return CheckResult(check_id, ERROR, 0.0, 0.0, device_class(), message)
    return CheckResult.from_dict(verdict)
