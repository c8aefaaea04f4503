"""The book's landing page: what a reader will learn, who it is for, how to run a lesson, and
how long each lesson took in the run the pages show (read from the report, never typed)."""

from __future__ import annotations

from .. import guide
from ..techniques import TECHNIQUES
from .runs import Run, fmt_seconds

WHO = """\
## Who it is for

People who can already train a model in PyTorch and want it to train faster, and instructors
who want to grade that skill automatically (`course grade`). You need Python and a first
PyTorch training loop behind you. No GPU is needed: every lesson runs on a laptop CPU, and each
says what your device can show and what a GPU measured (the results at the end of each page).
"""

HOW = """\
## How to run a lesson

Each lesson is a notebook: read the idea, write your answer in the exercise cells (replace
`raise NotImplementedError()`), and run the locked check cell below each one: it runs your code
and measures it, and says with numbers whether it is right and fast.

- **In Colab:** the rocket button at the top of a lesson page (or the "Open in Colab" badge)
  opens its notebook; its first cell installs the course. Pick a GPU runtime for the speed
  lessons.
- **On your machine:**

  ```bash
  git clone {repo} && cd course
  pip install -e ".[lab]"      # CPU only? first: pip install torch torchvision --index-url https://download.pytorch.org/whl/cpu
  jupyter lab notebooks/
  ```

- **One notebook:** the download button at the top of a lesson page (or the link in its note)
  gives the learner notebook, without answers.
- **Quick or full:** set `quick = True` (or `False`) in a notebook's parameters cell; otherwise
  its setup cell picks from this device's estimated run time and says why.
"""


def _lesson_line(stem: str, title: str, run: Run, committed: list[Run]) -> str:
    taught = [t.name for t in TECHNIQUES if t.lesson == stem]
    seconds = run.seconds(stem)
    if seconds is not None:
        took = f"{fmt_seconds(seconds)} in this book's run"
    else:
        other = next((r for r in committed if r.seconds(stem) is not None), None)
        took = (
            f"{fmt_seconds(other.seconds(stem))} on {other.device}, {other.mode}"
            if other
            else "not run yet"
        )
    what = "; ".join(taught) if taught else "see the lesson"
    return f"- [{title}]({stem}.ipynb): {what}. *{took}.*"


def landing_page(titles: dict[str, str], run: Run, committed: list[Run], repo: str) -> str:
    """`titles`: each lesson's notebook name and title, in reading order."""
    lines = [
        "# Faster PyTorch Training",
        "",
        "A graded course on making PyTorch training faster, one technique per notebook, each "
        "measured honestly on the device at hand: a laptop CPU, a Colab T4 or a big GPU. It "
        "follows Lorenz Kuhn's "
        f"[*{guide.TITLE}*]({guide.URL}), corrected "
        "and brought up to date, and goes beyond it (transformers, FSDP).",
        "",
        "## What you will learn",
        "",
        f"One lesson per line, with the techniques it teaches and how long it ran in the run "
        f"these pages show: `{run.command}` ({run.mode}) on {run.device}, {run.date}. Full "
        "mode takes longer; a notebook's setup cell estimates it for your device.",
        "",
        *(_lesson_line(stem, title, run, committed) for stem, title in titles.items()),
        "",
        "The [cheat sheet](cheatsheet.md) puts every technique on one page with its one line of "
        "code and what it measured; the [results](results.md) set every device side by side; "
        "the [glossary](glossary.md) defines the terms and the device classes.",
        "",
        WHO,
        HOW.format(repo=repo),
        "```{toctree}",
        ":caption: Lessons",
        ":maxdepth: 1",
        ":hidden:",
        "",
        *titles,
        "```",
        "",
        "```{toctree}",
        ":caption: Reference",
        ":maxdepth: 1",
        ":hidden:",
        "",
        "cheatsheet",
        "results",
        "glossary",
        "```",
    ]
    return "\n".join(lines) + "\n"
