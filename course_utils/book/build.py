"""Write the book's Sphinx source from a report folder and the repository, build it in a
temporary folder, check that every lesson the report ran shows its outputs, and publish the
HTML alone: no doctrees, and no `jupyter_execute/` (MyST-NB writes it beside the build)."""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import nbformat

from ..authoring import REPOSITORY
from ..errors import UsageError
from . import notebooks, pages, theme
from .cheatsheet import cheat_sheet
from .errors import BookError
from .landing import landing_page
from .results import results_page
from .runs import Run, committed_runs, qa_files

ROOT = Path(__file__).resolve().parents[2]
OUTPUT_MARK = 'class="cell_output'  # MyST-NB's container of a code cell's outputs


@dataclass
class Source:
    """What `write_source` wrote: the run the lesson pages show, and each lesson as drawn."""

    run: Run
    views: dict[str, notebooks.LessonView]  # by notebook name, in reading order
    report_dir: Path


def read_report(report_dir: Path) -> Run:
    path = report_dir / "results.json"
    if not path.is_file():
        raise UsageError(f"{path} not found: run `course report` first (it writes it)")
    return Run.from_json(json.loads(path.read_text(encoding="utf-8")))


def write_source(
    src: Path, report_dir: Path, *, with_solutions: bool = False, root: Path = ROOT
) -> Source:
    """Write the Sphinx source tree into `src`."""
    run = read_report(report_dir)
    own_class = run.env.get("device_class", "?")
    results = root / "docs" / "results"
    committed = committed_runs(results)
    if src.exists():
        shutil.rmtree(src)
    (src / "_static").mkdir(parents=True)
    views = {}
    for learner in sorted((root / "notebooks").glob("*.ipynb")):
        stem = learner.stem
        view = notebooks.learner_view(
            learner, report_dir / "executed" / learner.name, with_solutions=with_solutions
        )
        nb = view.nb
        for cell in nb.cells:
            if cell.cell_type == "markdown":
                cell.source = pages.rewrite_links(cell.source)
        header = pages.lesson_header(run, stem, view.how, with_solutions=with_solutions)
        nb.cells.insert(1, nbformat.v4.new_markdown_cell(header))
        nb.cells.append(
            nbformat.v4.new_markdown_cell(pages.lesson_references(stem, own_class, committed))
        )
        notebooks.write(nb, src / f"{stem}.ipynb")
        views[stem] = view
    titles = {stem: view.title for stem, view in views.items()}
    every = [run, *committed]
    written = {
        "index.md": landing_page(titles, run, committed, REPOSITORY),
        "cheatsheet.md": cheat_sheet(titles, every),
        "results.md": results_page(titles, every, qa_files(results)),
        "glossary.md": pages.glossary(root / "docs" / "glossary.md"),
        "conf.py": theme.CONF.format(repo=REPOSITORY),
        "favicon.svg": theme.FAVICON,
        "_static/course.css": theme.CSS,
    }
    for name, text in written.items():
        (src / name).write_text(text, encoding="utf-8")
    return Source(run, views, report_dir)


def unshown(source: Source, html: Path | None = None) -> list[str]:
    """The lessons the report ran whose page shows no output, each with why and what to run;
    with `html`, judged on the built pages too."""
    problems = []
    for stem, view in source.views.items():
        if stem not in source.run.notebooks:
            continue  # the report did not run it: drawn bare, and its note says so
        shown = view.how == "ran" and view.cells_with_outputs > 0
        if shown and html is not None:
            shown = OUTPUT_MARK in (html / f"{stem}.html").read_text(encoding="utf-8")
        if shown:
            continue
        executed = source.report_dir / "executed" / f"{stem}.ipynb"
        record = source.run.notebooks[stem]
        if view.how == "another version":
            why = (
                f"{executed} is another version of notebooks/{stem}.ipynb (cells "
                f"{', '.join(view.differs[:5])} differ): run `course assign` if solutions/ "
                f"changed, then `course report --only {stem.split('_')[0]}`"
            )
        elif record.get("outcome", "completed") != "completed":
            why = f"its run ended {record['outcome']} ({record.get('detail', '')})"
        elif view.how == "not run":
            why = f"{executed} is missing"
        elif not view.cells_with_outputs:
            why = f"{executed} holds no outputs"
        else:
            why = f"its built page shows none of the outputs of {executed}"
        problems.append(f"{stem}: the report ran it, but its page would show no outputs: {why}")
    return problems


def _publish(html: Path, out: Path, source: Source, root: Path) -> None:
    """Copy the built site to `out`: the HTML alone, the learner notebooks as its downloads
    (and behind the theme's download button, which serves _sources/NN.ipynb)."""
    if out.exists() and any(out.iterdir()) and not (out / "index.html").is_file():
        raise BookError(f"{out} exists and is not a book: give another --out, or remove it")
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(html, out, ignore=shutil.ignore_patterns(".doctrees", ".buildinfo"))
    (out / "downloads").mkdir()
    for stem in source.views:
        learner = root / "notebooks" / f"{stem}.ipynb"
        shutil.copy(learner, out / "downloads" / learner.name)
        shutil.copy(learner, out / "_sources" / learner.name)


def build_book(
    out: Path = Path("site"),
    report_dir: Path = Path("report"),
    *,
    with_solutions: bool = False,
    root: Path = ROOT,
) -> list[str]:
    """Build the site into `out`; returns Sphinx's warnings (a clean build has none). Raises
    BookError when a lesson the report ran would be shown without its outputs."""
    try:
        from sphinx.cmd.build import build_main
    except ImportError as exc:  # the [book] extra
        raise UsageError("course book needs Sphinx: pip install -e '.[book]'") from exc
    with tempfile.TemporaryDirectory(prefix="course-book-") as tmp:
        src, html, log = Path(tmp) / "src", Path(tmp) / "html", Path(tmp) / "warnings.txt"
        source = write_source(src, report_dir, with_solutions=with_solutions, root=root)
        if problems := unshown(source):
            raise BookError("\n".join(problems))
        doctrees = str(Path(tmp) / "doctrees")  # outside the site: never published
        code = build_main(["-b", "html", "-q", "-w", str(log), "-d", doctrees, str(src), str(html)])
        warnings = [w for w in log.read_text(encoding="utf-8").splitlines() if w.strip()]
        if code != 0:
            raise UsageError(f"sphinx-build failed ({code}): " + "; ".join(warnings[-5:]))
        if problems := unshown(source, html):
            raise BookError("\n".join(problems))
        _publish(html, Path(out), source, root)
    return warnings
