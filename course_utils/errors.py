"""One root exception for the course tooling, so the CLI can map failures to exit codes."""

from __future__ import annotations


class CourseError(Exception):
    """Raised for any expected failure of the course tooling (bad input, bad notebook)."""


class AuthoringError(CourseError):
    """Raised when a solution notebook's markers or check cells are malformed."""

    def __init__(self, notebook: str, cell_index: int | None, reason: str):
        self.notebook, self.cell_index, self.reason = notebook, cell_index, reason
        where = f"{notebook}, cell {cell_index}" if cell_index is not None else notebook
        super().__init__(f"{where}: {reason}")


class UsageError(CourseError):
    """Raised when a command is called with paths or options that cannot work."""


class TorchvisionMismatch(CourseError):
    """Raised when torchvision cannot load beside the installed torch (a pair of releases
    built for each other is needed); the message is one line with the command that fixes it.

    IPython shows `_render_traceback_` instead of a traceback, so a notebook's setup cell says
    that line, not `operator torchvision::nms does not exist` under twenty frames.
    """

    def _render_traceback_(self) -> list[str]:
        return [f"TorchvisionMismatch: {self}"]


class CheckFailed(AssertionError):
    """Raised by a check cell whose verdict is not a pass, so nbval marks the cell failed.

    IPython shows `_render_traceback_` instead of a traceback: the learner sees the verdict,
    not the harness's internals.
    """

    def __init__(self, check_id: str, status: str, summary: str):
        self.check_id, self.status, self.summary = check_id, status, summary
        super().__init__(f"[{check_id}] {status}: {summary}")

    def _render_traceback_(self) -> list[str]:
        return [f"Check {self.check_id} {self.status}: {self.summary}"]


class ReferenceUsed(CourseError):
    """Raised when the learner's code calls a lesson's reference answer while a check runs."""

    def __init__(self, name: str):
        self.name = name
        super().__init__(
            f"your code called the lesson's reference answer `{name}`: the check grades your "
            "own code, so write the exercise without it"
        )


class ToolUsed(ReferenceUsed):
    """Raised when the learner's code calls a harness tool that is the answer of the exercise
    being graded (lesson 00's timer and profiler: guards.lesson_tool)."""

    def __init__(self, name: str, what: str):
        self.name = name
        CourseError.__init__(
            self,
            f"your code called `{name}`, {what}: this exercise asks you to write that part "
            "yourself (everywhere else the course uses it freely)",
        )


class HeldOutUsed(ReferenceUsed):
    """Raised when the learner's code reads a held-out split while a check runs. `data` and
    `train` name the lesson's data and training split (lesson 11's images, lesson 18's text)."""

    def __init__(
        self, name: str, data: str = "images", train: str = "train_set", split: str = "test split"
    ):
        self.name = name
        CourseError.__init__(
            self,
            f"your code used the held-out {split} (`{name}`) while the check ran: a run that "
            f"looks at it, to stop early or to pick settings, has tuned itself to those {data}, "
            f"so its score no longer says how it does on new ones. Train and decide on {train} "
            "only (hold out part of it if you want a validation score)",
        )


class ReferenceWithheld(CourseError):
    """Raised when code calls a reference answer that the learner edition leaves out.

    `course release` replaces each answer by a placeholder that raises this, naming what the
    full course would have run; a check then says "graded by your instructor", and a demo
    cell says why it stops (course_utils.skipping), without a traceback.
    """

    def __init__(self, name: str, message: str = ""):
        self.name = name
        super().__init__(
            message
            or f"`{name}` is the lesson's reference answer, which the learner edition leaves "
            "out (the full course runs it here)"
        )
