"""Reference results: what other device classes measured, read from committed report runs.

Where this device cannot show a technique's effect (no GPU for cudnn.benchmark, pinned-memory
copies or asynchronous kernels), a notebook shows what a committed `course report` run measured
elsewhere, labelled with its device, date and command, never a figure typed into prose.
The runs are the `docs/results/<class>-<device>.json` files that `course report` writes; an
installed wheel carries a copy of them (documents.py), so Colab shows them too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from . import documents

RESULTS = documents.results_dir()
ONLINE = documents.ONLINE + "/results"


@dataclass
class ReferenceRow:
    """One figure of one committed run: an effect or a check's measured value."""

    source: str  # the results file
    device_class: str
    device_name: str
    date: str
    command: str
    what: str  # the effect's metric or the check's id
    figure: str  # "1.79x (IQR 1.70-1.85, n=9 pairs)" or a check's status and value


def _runs(results: Path) -> list[tuple[str, dict]]:
    out = []
    for path in sorted(results.glob("*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and isinstance(data.get("runs"), dict) and "env" in data:
            out.append((path.name, data))
    return out


def _effect_figure(effect: dict) -> str:
    n = effect.get("n", len(effect.get("ratios", [])))
    q1, q3 = effect.get("spread", [effect["ratio"], effect["ratio"]])
    spread = f" (IQR {q1:.2f}-{q3:.2f}, n={n} pairs)" if n > 1 else " (n=1, no spread)"
    return f"{effect['ratio']:.2f}x{spread}"


def reference_rows(notebook: str, results: Path = RESULTS) -> list[ReferenceRow]:
    """Every effect, and every check's status and value, that committed runs measured for
    `notebook` (e.g. "05_fast_kernels"), one row each, oldest file name first."""
    rows = []
    for name, data in _runs(results):
        run = data["runs"].get(notebook)
        if not run:
            continue
        env = data["env"]
        label = dict(
            source=name,
            device_class=env.get("device_class", "?"),
            device_name=env.get("device_name", "?"),
            date=data.get("date", "?"),
            command=data.get("command", "?"),
        )
        for effect in run.get("effects", []):
            rows.append(ReferenceRow(**label, what=effect["metric"], figure=_effect_figure(effect)))
        for check in run.get("checks", []):
            value = check.get("value")
            shown = f", measured {value:.4g}" if isinstance(value, (int, float)) else ""
            rows.append(ReferenceRow(**label, what=check["check"], figure=check["status"] + shown))
    return rows


def reference_results(notebook: str, exclude_class: str | None = None, results: Path = RESULTS):
    """Display, as a table, what committed runs measured for `notebook` on other devices.

    `exclude_class` leaves out the reader's own device class (they measure it themselves).
    Says so plainly where no committed run covers a class, rather than showing nothing."""
    from IPython.display import Markdown, display

    rows = [r for r in reference_rows(notebook, results) if r.device_class != exclude_class]
    if not rows:
        if results.is_dir():
            text = (
                f"No committed reference run covers `{notebook}` on another device class yet "
                f"(looked in {results}). Run `course report` on such a device and commit its "
                "`docs/results/<class>-<device>.json`."
            )
        else:  # nothing was looked at: say where the runs can be read instead
            text = (
                "This installation of course_utils ships no reference results; the committed "
                f"runs are at {ONLINE}/results."
            )
        display(Markdown(text))
        return rows
    lines = ["| device (class) | date, command | what | measured |", "|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r.device_name} (`{r.device_class}`) | {r.date}, `{r.command}` | {r.what} "
            f"| {r.figure} |"
        )
    display(Markdown("\n".join(lines)))
    return rows
