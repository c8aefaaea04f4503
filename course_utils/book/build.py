"""Write the book's Sphinx source from a report folder and the repository, then build it."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import nbformat

from ..errors import UsageError
from . import notebooks, pages

ROOT = Path(__file__).resolve().parents[2]

CONF = """\
project = "Faster PyTorch Training"
author = "the course's authors"
extensions = ["myst_nb"]
html_theme = "sphinx_book_theme"
html_title = "Faster PyTorch Training"
html_extra_path = ["extra"]
html_favicon = "favicon.svg"  # else browsers ask for /favicon.ico and log a 404
html_context = {{"default_mode": "light"}}  # unset, the theme logs a console error per page
html_theme_options = {{"repository_url": "{repo}", "use_repository_button": True}}
nb_execution_mode = "off"  # the book renders what `course report` ran; it executes nothing
myst_enable_extensions = ["colon_fence"]
exclude_patterns = ["_build", "extra"]
suppress_warnings = ["mystnb.unknown_mime_type"]  # the course's check and effect records
"""
FAVICON = (
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16">'
    '<path d="M2 14 L8 2 L14 14 Z" fill="#ee4c2c"/></svg>'
)


def _index(report: dict, lessons: list[str]) -> str:
    env = report.get("env", {})
    lines = [
        "# Faster PyTorch Training",
        "",
        "One lesson per technique of Kuhn's *Faster Deep Learning Training with PyTorch – a "
        "2021 Guide* (https://efficientdl.com/faster-deep-learning-in-pytorch-a-guide/), and "
        "two beyond it, each measured on the device at hand.",
        "",
        f"Every lesson page shows the outputs of `{report.get('command', '?')}` on "
        f"{env.get('device_name', '?')} (`{env.get('device_class', '?')}`), "
        f"{report.get('date', '?')}.",
        "",
        "```{toctree}",
        ":caption: Lessons",
        ":maxdepth: 1",
        "",
        *lessons,
        "```",
        "",
        "```{toctree}",
        ":caption: Reference",
        ":maxdepth: 1",
        "",
        "cheatsheet",
        "results",
        "glossary",
        "```",
    ]
    return "\n".join(lines) + "\n"


def write_source(
    src: Path, report_dir: Path, *, with_solutions: bool = False, root: Path = ROOT
) -> list[str]:
    """Write the Sphinx source tree into `src`; returns the lessons it holds."""
    results_json = report_dir / "results.json"
    if not results_json.is_file():
        raise UsageError(f"{results_json} not found: run `course report` first (it writes it)")
    report = json.loads(results_json.read_text(encoding="utf-8"))
    own_class = report.get("env", {}).get("device_class", "?")
    results = root / "docs" / "results"
    if src.exists():
        shutil.rmtree(src)
    (src / "extra" / "downloads").mkdir(parents=True)
    (src / "extra" / "results").mkdir(parents=True)
    (src / "results").mkdir()
    lessons = []
    for learner in sorted((root / "notebooks").glob("*.ipynb")):
        nb, how = notebooks.learner_view(
            learner, report_dir / "executed" / learner.name, with_solutions=with_solutions
        )
        stem = learner.stem
        for cell in nb.cells:
            if cell.cell_type == "markdown":
                cell.source = pages.rewrite_links(cell.source)
        nb.cells.insert(1, nbformat.v4.new_markdown_cell(pages.lesson_header(report, stem, how)))
        nb.cells.append(
            nbformat.v4.new_markdown_cell(pages.lesson_references(stem, own_class, results))
        )
        notebooks.write(nb, src / f"{stem}.ipynb")
        shutil.copy(learner, src / "extra" / "downloads" / learner.name)
        lessons.append(stem)
    for path in sorted(results.iterdir()):
        if path.suffix == ".md":
            (src / "results" / path.name).write_text(
                pages.rewrite_links(path.read_text(encoding="utf-8")), encoding="utf-8"
            )
        elif path.is_file():
            shutil.copy(path, src / "extra" / "results" / path.name)
    for path in sorted(results.glob("*.png")):  # .md pages show their figures from beside them
        shutil.copy(path, src / "results" / path.name)
    stems = set(lessons)
    (src / "index.md").write_text(_index(report, lessons), encoding="utf-8")
    (src / "cheatsheet.md").write_text(pages.cheat_sheet(results, stems), encoding="utf-8")
    (src / "results.md").write_text(
        pages.results_page(results)
        + _hidden_toc(sorted(p.stem for p in (src / "results").glob("*.md"))),
        encoding="utf-8",
    )
    (src / "glossary.md").write_text(
        pages.glossary(root / "docs" / "glossary.md"), encoding="utf-8"
    )
    from ..authoring import REPOSITORY

    (src / "conf.py").write_text(CONF.format(repo=REPOSITORY), encoding="utf-8")
    (src / "favicon.svg").write_text(FAVICON, encoding="utf-8")
    return sorted(stems)


def _hidden_toc(names: list[str]) -> str:
    return "\n```{toctree}\n:hidden:\n\n" + "\n".join(f"results/{n}" for n in names) + "\n```\n"


def build_book(
    out: Path = Path("site"),
    report_dir: Path = Path("report"),
    *,
    with_solutions: bool = False,
    root: Path = ROOT,
) -> list[str]:
    """Build the site into `out`; returns Sphinx's warnings (a clean build has none)."""
    try:
        from sphinx.cmd.build import build_main
    except ImportError as exc:  # the [book] extra
        raise UsageError("course book needs Sphinx: pip install -e '.[book]'") from exc
    with tempfile.TemporaryDirectory(prefix="course-book-") as tmp:
        src, log = Path(tmp) / "src", Path(tmp) / "warnings.txt"
        write_source(src, report_dir, with_solutions=with_solutions, root=root)
        code = build_main(["-b", "html", "-q", "-w", str(log), str(src), str(out)])
        warnings = [w for w in log.read_text(encoding="utf-8").splitlines() if w.strip()]
    if code != 0:
        raise UsageError(f"sphinx-build failed ({code}): " + "; ".join(warnings[-5:]))
    return warnings
