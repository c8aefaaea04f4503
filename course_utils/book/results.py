"""The results page: every lesson, and under it what each run measured for each technique,
with its metric, unit and direction; "not measured on these devices" where no run did."""

from __future__ import annotations

from ..effects import Effect
from ..techniques import TECHNIQUES, Technique
from .runs import Run, figure, fmt_seconds, repo_link

INTRO = """\
# Results per device

Each figure is a lesson's headline effect (`cu.effect`): the technique against its baseline on
one metric, baseline → improved in its unit, and the ratio in words: *faster* for time, *less*
for memory. It is the median of n interleaved pairs with its IQR, or one ratio (n=1: no spread
measured). The lesson pages show the outputs of *this book's run*; the others are the runs
committed in `docs/results`.
"""


def measured(t: Technique, runs: list[Run]) -> list[tuple[Run, Effect]]:
    """Each run's effect for technique `t` (the effects of its lesson whose name it starts)."""
    if not t.effect:
        return []
    return [
        (run, e) for run in runs for e in run.effects(t.lesson) if e.technique.startswith(t.effect)
    ]


def run_name(run: Run) -> str:
    return "this book's run" if not run.source else run.source.removesuffix(".json")


def _runs_section(runs: list[Run]) -> list[str]:
    lines = ["## The runs", ""]
    for run in runs:
        files = (
            f" ({repo_link(run.source)}, {repo_link(run.source.replace('.json', '.md'))})"
            if run.source
            else ": its outputs are on the lesson pages"
        )
        torch = run.env.get("torch", "?")
        lines.append(f"- **{run_name(run)}**: {run.label()}, {run.mode}, torch {torch}{files}")
    return [*lines, ""]


def _technique(t: Technique, runs: list[Run]) -> list[str]:
    found = measured(t, runs)
    if not found:
        return [f"- **{t.name}**: not measured on these devices"]
    first = found[0][1]
    lines = [f"- **{t.name}** (*{first.technique}*), {first.metric}:"]
    for run, e in found:
        metric = f" ({e.metric})" if e.metric != first.metric else ""
        lines.append(f"  - {run_name(run)}, {run.device}{metric}: {figure(e)}")
    return lines


def _lesson_section(stem: str, title: str, runs: list[Run]) -> list[str]:
    lines = [f"## [{title}]({stem}.ipynb)", ""]
    rows = [t for t in TECHNIQUES if t.lesson == stem and t.effect]
    if not rows:
        lines.append(
            "No headline effect: this lesson's checks grade what you write, speed parts included."
        )
    for t in rows:
        lines += _technique(t, runs)
    ran = [
        f"{run_name(run)}: {run.checks_text(stem)}, {fmt_seconds(run.seconds(stem))} ({run.mode})"
        for run in runs
        if stem in run.notebooks
    ]
    said = "; ".join(ran) if ran else "no run covers this lesson yet"
    return [*lines, "", f"*Checks and run time:* {said}.", ""]


def results_page(titles: dict[str, str], runs: list[Run], qa: list[str]) -> str:
    """`runs`: this book's run first, then the committed ones; `qa`: the other files of
    docs/results, linked in the repository at the end."""
    lines = [INTRO, *_runs_section(runs)]
    for stem, title in titles.items():
        lines += _lesson_section(stem, title, runs)
    logs = [n for n in qa if n.endswith(".md")] or qa
    if logs:
        lines += [
            "## Test and QA logs",
            "",
            "The other files in `docs/results` are the course's own test and QA logs "
            "(selftests, learner paths, test runs), kept as evidence in the repository: "
            + ", ".join(repo_link(n) for n in logs)
            + " (each beside its .json).",
            "",
        ]
    return "\n".join(lines)
