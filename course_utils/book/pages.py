"""The parts of a lesson page the book adds (its header and the other devices' results), and
the links of the course's markdown as the site serves them."""

from __future__ import annotations

import re
from pathlib import Path

from ..authoring import REPOSITORY
from .runs import REPO_FILES, Run, figure

LINK = re.compile(r"\[([^\]]+)\]\(\.\./docs/([^)#\s]+)(#[^)\s]*)?\)")
LOCAL = re.compile(r"\[([^\]]+)\]\((#[^)\s]+)\)")


def site_href(doc_path: str, anchor: str = "") -> str:
    """Where a repository path under docs/ is read from the site: the glossary is a page of the
    book; docs/results and every other file are read in the repository."""
    if doc_path == "glossary.md":
        return "glossary.html" + anchor
    if doc_path.startswith("results/"):
        return REPO_FILES + doc_path.removeprefix("results/") + anchor
    return f"{REPOSITORY}/blob/main/docs/{doc_path}{anchor}"


def rewrite_links(markdown: str) -> str:
    """Links into ../docs/ and to anchors of the same page become raw HTML links into the
    site: the book's link checker judges them (Sphinx does not know HTML anchors)."""
    markdown = LINK.sub(lambda m: f'<a href="{site_href(m[2], m[3] or "")}">{m[1]}</a>', markdown)
    return LOCAL.sub(lambda m: f'<a href="{m[2]}">{m[1]}</a>', markdown)


def glossary(source: Path) -> str:
    return rewrite_links(source.read_text(encoding="utf-8"))


def lesson_header(run: Run, lesson: str, how: str, *, with_solutions: bool = False) -> str:
    """The note under a lesson's title: whose outputs these are, and how to run it yourself."""
    where = f"{run.device}, {run.date}"
    if how == "ran" and with_solutions:
        text = (
            f"Outputs from `{run.command}` ({run.mode}) on {where}, with the reference answers "
            "and the checks' verdicts on them (an instructor's book)."
        )
    elif how == "ran":
        text = (
            f"Outputs from `{run.command}` ({run.mode}) on {where}. Demos ran on the reference "
            "answers; exercise cells show your starting code, and each check cell says only "
            "whether the reference answer passed."
        )
    else:
        what = "did not run this lesson" if how == "not run" else "ran another version of it"
        text = (
            f"The report run of {where} {what}: this page shows the notebook without outputs "
            f"(`course report --only {lesson.split('_')[0]}` runs it)."
        )
    return (
        f"```{{note}}\n{text}\n\n"
        f'To run it: <a href="downloads/{lesson}.ipynb">download the learner notebook</a> (or '
        "the download button above), or open it in Colab (the rocket button above, or the "
        "badge). Results of other devices are at the end of this page.\n```"
    )


def lesson_references(lesson: str, own_class: str, runs: list[Run]) -> str:
    """What the committed runs of other device classes measured for `lesson`."""
    lines = ["## Reference results on other devices", ""]
    others = [r for r in runs if r.env.get("device_class") != own_class and lesson in r.notebooks]
    for run in others:
        effects = run.effects(lesson)
        said = "; ".join(f"{e.technique}, {e.metric}: {figure(e)}" for e in effects)
        lines.append(f"- {run.label()}: {said or 'no headline effect'}; {run.checks_text(lesson)}.")
    if not others:
        lines.append(
            f"No committed run of a device class other than `{own_class}` covers this lesson yet."
        )
    lines += ["", "The [results page](results.md) sets every committed run side by side."]
    return "\n".join(lines)
