"""`course book` renders the learner notebooks with a report run's outputs, the results of
every committed run, the cheat sheet and the glossary, and every internal link resolves."""

import json
import re
from pathlib import Path

import nbformat
import pytest

pytest.importorskip("sphinx")
pytest.importorskip("myst_nb")

from course_utils.authoring import read  # noqa: E402
from course_utils.book import build_book  # noqa: E402
from course_utils.book.links import check_links  # noqa: E402
from course_utils.book.notebooks import SOLUTION_MARK, learner_view  # noqa: E402
from course_utils.techniques import TECHNIQUES  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
LESSON = "09_no_bias_before_bn"
RESULTS = ROOT / "docs" / "results"


def _solution_lines(name: str) -> list[str]:
    """Lines only the reference answers have (between the solution marks)."""
    learner = "\n".join(c.source for c in read(ROOT / "notebooks" / f"{name}.ipynb").cells)
    lines = []
    for cell in read(ROOT / "solutions" / f"{name}.ipynb").cells:
        body = re.search(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", cell.source, re.S)
        if body:
            lines += [ln.strip() for ln in body[1].splitlines() if len(ln.strip()) > 25]
    return [ln for ln in lines if ln not in learner]


def _executed(report: Path, name: str) -> None:
    """A report run of `name`'s solution: each code cell printed its own number."""
    nb = read(ROOT / "solutions" / f"{name}.ipynb")
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "code":
            cell.outputs = [
                nbformat.v4.new_output("stream", name="stdout", text=f"output of cell {i}\n")
            ]
    (report / "executed").mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, str(report / "executed" / f"{name}.ipynb"))


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    report = tmp_path_factory.mktemp("report")
    data = json.loads((RESULTS / "cpu-bf16-amd-epyc.json").read_text())
    data["command"], data["date"] = "course report --quick", "2026-12-03 12:00 UTC"
    (report / "results.json").write_text(json.dumps(data))
    _executed(report, LESSON)
    out = tmp_path_factory.mktemp("site") / "site"
    warnings = build_book(out, report)
    return out, warnings


def test_the_book_builds_without_warnings_and_every_internal_link_resolves(site):
    out, warnings = site
    assert warnings == []
    links = check_links(out)
    assert links.broken == []
    assert links.pages >= len(list((ROOT / "notebooks").glob("*.ipynb"))) + 4
    assert links.checked > 100


def test_a_lesson_page_shows_the_reports_outputs_but_not_the_reference_answers(site):
    out, _ = site
    page = (out / f"{LESSON}.html").read_text()
    assert "output of cell" in page and "Outputs from" in page and "--quick" in page
    hidden = _solution_lines(LESSON)
    assert hidden, "the lesson has solution lines to look for"
    assert not [ln for ln in hidden if ln in page.replace("&quot;", '"').replace("&#39;", "'")]
    assert (out / "downloads" / f"{LESSON}.ipynb").read_bytes() == (
        ROOT / "notebooks" / f"{LESSON}.ipynb"
    ).read_bytes()


def test_a_lesson_the_report_did_not_run_is_shown_bare_and_says_so(site):
    out, _ = site
    page = (out / "00_measuring.html").read_text()
    assert "did not run this lesson" in page and "output of cell" not in page


def test_a_report_of_another_version_of_the_notebook_is_not_shown_against_this_one(tmp_path):
    _executed(tmp_path, LESSON)
    run = read(tmp_path / "executed" / f"{LESSON}.ipynb")
    run.cells.append(nbformat.v4.new_code_cell("print('added since')"))
    nbformat.write(run, str(tmp_path / "executed" / f"{LESSON}.ipynb"))
    nb, how = learner_view(
        ROOT / "notebooks" / f"{LESSON}.ipynb", tmp_path / "executed" / f"{LESSON}.ipynb"
    )
    assert how == "another version"
    assert not any(c.get("outputs") for c in nb.cells if c.cell_type == "code")


def test_with_solutions_shows_the_answer_cells_and_their_outputs(tmp_path):
    _executed(tmp_path, LESSON)
    nb, how = learner_view(
        ROOT / "notebooks" / f"{LESSON}.ipynb",
        tmp_path / "executed" / f"{LESSON}.ipynb",
        with_solutions=True,
    )
    answers = [c for c in nb.cells if SOLUTION_MARK in c.source]
    assert how == "ran" and answers and all(c.outputs for c in answers)


def test_the_cheat_sheet_has_a_row_per_technique_of_every_lesson_in_the_book(site):
    out, _ = site
    page = (out / "cheatsheet.html").read_text()
    lessons = {p.stem for p in (ROOT / "notebooks").glob("*.ipynb")}
    for t in (t for t in TECHNIQUES if t.lesson in lessons):
        assert t.name in page, t.name
    assert page.count("<tr") - 1 == sum(t.lesson in lessons for t in TECHNIQUES)


def test_the_results_page_links_every_file_in_docs_results_and_the_site_serves_it(site):
    out, _ = site
    page = (out / "results.html").read_text()
    for path in RESULTS.iterdir():
        assert path.name in page, path.name
    assert (out / "results" / "cpu-bf16-amd-epyc.json").is_file()
    assert (out / "results" / "learner-path-cpu.html").is_file()  # .md files become pages


def test_search_indexes_the_lessons(site):
    out, _ = site
    index = (out / "searchindex.js").read_text()
    assert "autocast" in index and "glossary" in index


def test_a_link_to_a_missing_page_or_anchor_is_reported(tmp_path):
    (tmp_path / "index.html").write_text(
        '<a href="a.html#here">ok</a><a href="a.html#gone">x</a><a href="nope.html">y</a>'
        '<img src="i.png"><a href="https://example.org/">external</a>'
    )
    (tmp_path / "a.html").write_text('<h1 id="here">A</h1>')
    links = check_links(tmp_path)
    assert links.checked == 4
    assert sorted(b.split(" (")[0] for b in links.broken) == [
        "index.html: a.html#gone",
        "index.html: i.png",
        "index.html: nope.html",
    ]
