"""The documents a notebook reads, the glossary and the committed reference results, found
whether course_utils runs from the repository or from an installed wheel.

docs/ in the repository is the one source: `course report --reference` writes docs/results and
the glossary is edited there. A wheel (Colab's setup cell pip-installs one) has no repository
beside it, so the build copies docs/glossary.md and docs/results/*.json into the package as
course_utils/_docs/ (setup.py); an editable install has no such folder and reads docs/ itself.
"""

from __future__ import annotations

import re
from pathlib import Path

PACKAGED = Path(__file__).resolve().parent / "_docs"  # only in a built wheel
REPOSITORY = Path(__file__).resolve().parent.parent / "docs"
ONLINE = "https://github.com/faster-pytorch-training/course/tree/main/docs"


def docs_dir() -> Path:
    """The wheel's copy where there is one (an installed package reads what it shipped with),
    else the repository's docs/."""
    return PACKAGED if PACKAGED.is_dir() else REPOSITORY


def results_dir() -> Path:
    """The committed `course report` runs: <class>-<device>.json, one per device."""
    return docs_dir() / "results"


def glossary_path() -> Path:
    return docs_dir() / "glossary.md"


def glossary_entry(term: str) -> str | None:
    """The glossary's paragraph for `term` (its anchor, as in `glossary.md#all-reduce`)."""
    text = glossary_path().read_text(encoding="utf-8")
    anchor = re.escape(term.strip().lower().replace(" ", "-"))
    found = re.search(rf'<a id="{anchor}"></a>(.*?)(?:\n\s*\n|\Z)', text, re.DOTALL)
    return found[1].strip() if found else None


def glossary(term: str | None = None) -> str:
    """Show the glossary (with the device classes), or one term's entry: where a notebook's
    link to glossary.md does not open (Colab), `cu.glossary("all-reduce")` does."""
    from IPython.display import Markdown, display

    if not glossary_path().is_file():
        shown = f"The glossary is not installed here; read it at {ONLINE}/glossary.md"
    elif term is None:
        shown = glossary_path().read_text(encoding="utf-8")
    else:
        shown = glossary_entry(term) or f"`{term}` is not in the glossary ({ONLINE}/glossary.md)"
    display(Markdown(shown))
    return shown
