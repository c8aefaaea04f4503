"""The one writer of a grading output folder: feedback, executed notebooks, the state file
that lets an interrupted run continue, and the CSVs."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import nbformat

from .feedback import feedback, write_csvs
from .records import Graded, Row, Submission

STATE_FILE = ".grading-state.json"


class Outbox:
    """The one writer of an output folder: feedback, executed notebooks, the state file
    (written after every submission, so an interrupted run continues) and the CSVs."""

    def __init__(self, out: Path):
        self.out = out
        out.mkdir(parents=True, exist_ok=True)
        (out / "feedback").mkdir(exist_ok=True)
        self.state_path = out / STATE_FILE
        self.state = json.loads(self.state_path.read_text()) if self.state_path.exists() else {}
        self.results: dict[str, tuple[list[Row], bool]] = {}
        self._isolation_said = ""

    def reusable(self, sub: Submission, keys: set[str]) -> list[Row] | None:
        previous = self.state.get(sub.name)
        if (
            previous
            and previous["fingerprint"] in keys
            and (self.out / "feedback" / f"{sub.slug}.md").exists()
        ):
            return [Row(**r) for r in previous["rows"]]
        return None

    def reuse(self, sub: Submission, rows: list[Row]) -> None:
        self.results[sub.name] = (rows, True)

    @staticmethod
    def write_executed(out: Path, sub: Submission, graded: Graded) -> None:
        if graded.executed is not None:
            (out / "executed").mkdir(parents=True, exist_ok=True)
            nbformat.write(graded.executed, str(out / "executed" / f"{sub.slug}.ipynb"))

    def record(self, sub: Submission, graded: Graded) -> None:
        if graded.isolation and graded.isolation != self._isolation_said:
            _log(f"{sub.name}: its kernel ran in {graded.isolation}")
            self._isolation_said = graded.isolation
        self.write_executed(self.out, sub, graded)
        (self.out / "feedback" / f"{sub.slug}.md").write_text(
            feedback(sub, graded.rows, graded.notes), encoding="utf-8"
        )
        self.state[sub.name] = {
            "fingerprint": graded.key,
            "rows": [asdict(r) for r in graded.rows],
            "seconds": graded.seconds,
            "device_class": graded.device_class,
            "isolation": graded.isolation,
        }
        tmp = self.state_path.with_name(STATE_FILE + ".tmp")  # whole or not at all
        tmp.write_text(json.dumps(self.state, indent=1))
        tmp.replace(self.state_path)
        self.results[sub.name] = (graded.rows, False)

    def finish(self, subs: list[Submission]) -> GradeSummary:
        write_csvs(self.out, [self.results[s.name][0] for s in subs])
        counts: dict[str, int] = {}
        for rows, _ in self.results.values():
            for r in rows:
                counts[r.status] = counts.get(r.status, 0) + 1
        reused = sum(reused for _, reused in self.results.values())
        return GradeSummary(self.out, len(subs), reused, counts)


def _log(line: str) -> None:
    """A line of the run's log, between progress bars."""
    from tqdm.auto import tqdm

    tqdm.write(f"course grade: {line}", file=sys.stderr)


@dataclass
class GradeSummary:
    out: Path
    submissions: int
    reused: int
    counts: dict[str, int]

    def __str__(self) -> str:
        counts = ", ".join(f"{k} {v}" for k, v in sorted(self.counts.items()))
        return (
            f"graded {self.submissions} submission(s) ({self.reused} unchanged, reused) -> "
            f"{self.out / 'grades.csv'}; checks: {counts or 'none'}"
        )
