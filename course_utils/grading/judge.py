"""The judge: where a submission's checks are decided, outside the learner's sandbox.

It runs in the grading runner (course_utils.grading.execute), beside papermill, with the full
harness: the lessons' references, thresholds and check bodies. It listens on a socket in the
kernel's work folder. When a locked check cell runs, the kernel opens a session for its check
(course_utils.judged); the judge accepts it only while that very cell runs, once, runs the
check's body with the cell's answers as `Remote` answers, sends each probe to the kernel
(course_utils.probes), decides, reports the verdict to the grader and sends it back for the
notebook to show.

What the kernel can do to a verdict is therefore bounded by what its probes return: plain
data (course_utils.wire), compared with what the judge computed itself. Not-applicable is
decided here too, from the device and settings the judge sees, never from the kernel.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import wire
from ..judged import AnswerRef
from ..probes import LearnerRaised, Remote, SessionLost, judge_draws

# the learner's exceptions the judge keeps by type: NotImplementedError means "not attempted";
# anything else (ReferenceWithheld included: the grading kernel has no reference to withhold)
# is the learner's code failing
NOT_ATTEMPTED_TYPES = ("NotImplementedError",)


class Session:
    """One check's conversation with the kernel: the judge's end of `observe`."""

    def __init__(self, conn: socket.socket, check_id: str):
        self.conn, self.check_id = conn, check_id
        self.probes_run = 0

    def _ref(self, value: Any) -> Any:
        return AnswerRef(value.index) if isinstance(value, Remote) else value

    def observe(self, name: str, args: tuple, kwargs: dict) -> Any:
        payload = (
            tuple(self._ref(a) for a in args),
            {k: self._ref(v) for k, v in kwargs.items()},
        )
        try:
            wire.send(self.conn, {"probe": name}, payload, with_value=True)
            control, value = wire.receive(self.conn)
        except (OSError, EOFError) as exc:
            raise SessionLost(
                "the notebook stopped answering before the check finished (its cell was "
                f"interrupted at the time limit, or the kernel died): {type(exc).__name__}"
            ) from None
        except wire.WireError as exc:
            raise LearnerRaised("WireError", f"what came back could not be read: {exc}") from None
        self.probes_run += 1
        if "raised" in control:
            told = control["raised"] if isinstance(control["raised"], dict) else {}
            kind, message = str(told.get("type", "Exception")), str(told.get("message", ""))
            if kind in NOT_ATTEMPTED_TYPES:
                raise NotImplementedError(message)
            raise LearnerRaised(kind, message[:500], str(told.get("where", ""))[:300])
        return value


def _answers(specs: Any, data: Any, names: Any, session: Session) -> tuple[tuple, dict]:
    """The check body's arguments: Remote answers for the kernel's callables, its plain values
    as sent."""
    if not isinstance(specs, list) or not isinstance(data, list) or not isinstance(names, list):
        raise wire.WireError("an opening message of the wrong shape")
    values, plain = [], iter(data)
    for index, spec in enumerate(specs):
        if isinstance(spec, dict) and spec.get("callable"):
            values.append(Remote(str(spec.get("name", "answer"))[:100], index, session))
        else:
            values.append(next(plain, None))
    split = len(values) - len(names)
    if split < 0 or not all(isinstance(n, str) for n in names):
        raise wire.WireError("keyword arguments of the wrong shape")
    return tuple(values[:split]), dict(zip(names, values[split:], strict=True))


class Judge:
    """Listen on `path`; decide each check whose locked cell is running (see the module
    docstring). `current_cell()` says which cell runs now: (its index, its check id or None).
    `report(check_id, verdict or None, detail)` hears each decision or lost session."""

    def __init__(
        self,
        path: Path,
        current_cell: Callable[[], tuple[int, str | None] | None],
        report: Callable[[str, dict | None, str], None],
    ):
        self.path, self.current_cell, self.report = path, current_cell, report
        self.judged_cells: set[int] = set()
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(str(path))
        os.chmod(path, 0o777)  # the kernel runs as another user (course_utils.grading.sandbox)
        self.server.listen(4)
        self._thread = threading.Thread(target=self._serve, name="judge", daemon=True)

    def start(self) -> Judge:
        self._thread.start()
        return self

    def close(self) -> None:
        try:
            self.server.close()
        except OSError:
            pass

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:  # closed: the run is over
                return
            with conn:
                try:
                    self._session(conn)
                except (OSError, EOFError, wire.WireError):
                    pass  # the kernel hung up or sent garbage before a check began

    def _refuse(self, conn: socket.socket, reason: str) -> None:
        try:
            wire.send(conn, {"refused": {"reason": reason}})
        except OSError:
            pass

    def _session(self, conn: socket.socket) -> None:
        control, data = wire.receive(conn)
        check_id = str(control.get("open", ""))
        running = self.current_cell()
        if running is None or running[1] != check_id:
            self._refuse(
                conn,
                f"check {check_id} is decided only in its locked cell, when the grader runs it "
                "(here the check was called from another cell)",
            )
            return
        if running[0] in self.judged_cells:
            self._refuse(conn, f"check {check_id} was already decided in this run of its cell")
            return
        self.judged_cells.add(running[0])
        run = _registered(check_id)
        if run is None:
            self._refuse(conn, f"no check {check_id} in this course")
            return
        from ..checks import evaluate

        session = Session(conn, check_id)
        args, kwargs = _answers(control.get("answers"), data, control.get("kwargs"), session)
        try:
            with judge_draws():
                result = evaluate(check_id, run.points, run.hint, run.body, args, kwargs)
        except SessionLost as exc:
            self.report(check_id, None, str(exc))
            return
        verdict = result.to_dict()
        self.report(check_id, verdict, "")
        try:
            wire.send(conn, {"verdict": verdict})
        except OSError:
            pass  # the verdict stands; the notebook just does not show it


def _registered(check_id: str):
    """The registered check `check_id`, importing its lesson: the id's prefix is a notebook's
    number (selftest.items.LESSONS) or the lesson package's own name (`toy-double`)."""
    import importlib

    from ..checks import REGISTRY
    from ..selftest.items import LESSONS

    prefix = check_id.split("-", 1)[0]
    if check_id not in REGISTRY:
        package = LESSONS[prefix][1] if prefix in LESSONS else prefix
        if package.isidentifier():
            try:
                importlib.import_module(f"course_utils.lessons.{package}")
            except ImportError:
                return None
    return REGISTRY.get(check_id)
