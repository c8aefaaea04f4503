"""What grading passes around: a submission, the rows it earns, and what grading one gives
back. Shared by the serial grader, the Dask client, shards and the Gradescope runner."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from ..protocol import ERROR, GRADE_COLUMNS


@dataclass
class Row:
    """One row of grades.csv: one check of one submission."""

    submission: str
    notebook: str
    check: str
    status: str
    points: float
    max_points: float
    value: float | None
    threshold: float | None
    device_class: str
    message: str
    hint: str = ""  # hint, parts, unit and better are for the feedback, not grades.csv columns
    parts: list = field(default_factory=list)
    unit: str = ""  # of value and threshold (checks.Part.unit)
    better: str = ""  # "higher", "lower" or "" (protocol.BETTER)

    @classmethod
    def columns(cls) -> list[str]:
        return list(GRADE_COLUMNS)

    @classmethod
    def error(cls, submission: str, reason: str, notebook: str = "") -> Row:
        """The one row of a submission that could not be graded at all."""
        return cls(submission, notebook, "", ERROR, 0.0, 0.0, None, None, "", reason)


@dataclass
class Submission:
    path: Path
    name: str  # as shown in grades.csv: relative to the folder given, or the file name

    @property
    def slug(self) -> str:
        """A file name for its feedback and executed notebook that no other submission's can
        be: a name with a folder in it or a `__` gets a hash of the whole name, so
        `x/08_a.ipynb` and `x__08_a.ipynb` never share `x__08_a.md`."""
        flat = self.name.removesuffix(".ipynb").replace("/", "__").replace("\\", "__")
        if flat == self.name.removesuffix(".ipynb") and "__" not in flat:
            return flat
        return f"{flat}-{hashlib.sha256(self.name.encode('utf-8')).hexdigest()[:8]}"


@dataclass
class Graded:
    """What grading one submission gives back; nothing is written until the caller (the
    only writer: the serial loop, or the Dask client) records it."""

    rows: list[Row]
    notes: dict[str, str] = field(default_factory=dict)
    executed: nbformat.NotebookNode | None = None
    seconds: float = 0.0
    key: str = ""  # the reuse fingerprint, computed where it was graded
    device_class: str = ""  # of the machine that graded it
    skipped_demos: int = 0
    isolation: str = ""  # how its kernel was isolated (sandbox.Isolation.describe)
