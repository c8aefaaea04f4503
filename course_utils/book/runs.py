"""The `course report` runs the book reads: the one its lesson pages show, and the committed ones
in docs/results; each effect said with its metric, unit and direction, never a bare "3.44x".

Only files `course report` wrote (a JSON with `env` and `runs`, and its .md) are runs. The other
files in docs/results are test and QA logs kept as evidence in the repository: the book links
them there and publishes none of them (they name machines' paths and reference answers).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ..authoring import REPOSITORY
from ..effects import Effect

REPO_FILES = f"{REPOSITORY}/blob/main/docs/results/"


@dataclass
class Run:
    """One `course report` run: the device it measured, when, how, and what per notebook."""

    source: str  # its file in docs/results, or "" for the run the lesson pages show
    env: dict
    date: str
    command: str
    quick: bool
    notebooks: dict = field(default_factory=dict)  # notebook -> the report's record of it

    @classmethod
    def from_json(cls, data: dict, source: str = "") -> Run:
        return cls(
            source,
            data.get("env", {}),
            data.get("date", "?"),
            data.get("command", "?"),
            bool(data.get("quick")),
            data.get("runs", {}),
        )

    @property
    def device(self) -> str:
        return f"{self.env.get('device_name', '?')} (`{self.env.get('device_class', '?')}`)"

    @property
    def mode(self) -> str:
        return "quick mode" if self.quick else "full mode"

    def label(self) -> str:
        """Device, class, date and command, in one line of markdown."""
        return f"{self.device}, {self.date}, `{self.command}`"

    def effects(self, notebook: str) -> list[Effect]:
        return [Effect.from_dict(e) for e in self.notebooks.get(notebook, {}).get("effects", [])]

    def seconds(self, notebook: str) -> float | None:
        return self.notebooks.get(notebook, {}).get("seconds")

    def checks_text(self, notebook: str) -> str:
        """How many checks passed or did not apply: statuses only, as a check's message can
        name the answer it compared with."""
        checks = self.notebooks.get(notebook, {}).get("checks", [])
        ok = sum(c.get("status") in ("passed", "not-applicable") for c in checks)
        return f"{ok}/{len(checks)} checks passed or not applicable" if checks else "no checks"


def is_run(data: object) -> bool:
    return isinstance(data, dict) and isinstance(data.get("runs"), dict) and "env" in data


def committed_runs(results: Path) -> list[Run]:
    """Every `course report` run committed in `results`, by file name."""
    runs = []
    for path in sorted(results.glob("*.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if is_run(data):
            runs.append(Run.from_json(data, path.name))
    return runs


def qa_files(results: Path) -> list[str]:
    """The files of `results` that are not a run: test logs, selftests, learner-path tables."""
    runs = {Path(r.source).stem for r in committed_runs(results)}
    return [p.name for p in sorted(results.iterdir()) if p.is_file() and p.stem not in runs]


def repo_link(name: str) -> str:
    """A file of docs/results where the repository shows it (the book does not publish it)."""
    return f'<a href="{REPO_FILES}{name}">{name}</a>'


def figure(e: Effect) -> str:
    """The ratio in words, baseline → improved in the metric's unit, and its spread."""
    return f"**{e.gain()}**: {e.change().replace('->', '→')} ({e.spread_text()})"


def fmt_seconds(seconds: float | None) -> str:
    if seconds is None:
        return ""
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.1f} min"
