"""`course book` renders the learner notebooks with a real `course report` run's outputs and no
answer, the results of every run with metric and direction, the cheat sheet and the glossary;
every internal link resolves, and nothing it builds is left in the repository."""

import copy
import json
import re
import subprocess
import sys
from html import unescape
from pathlib import Path

import nbformat
import pytest

pytest.importorskip("sphinx")
pytest.importorskip("myst_nb")

from course_utils import cli  # noqa: E402
from course_utils.authoring import read  # noqa: E402
from course_utils.book import BookError, build_book  # noqa: E402
from course_utils.book.links import check_links  # noqa: E402
from course_utils.book.notebooks import SOLUTION_MARK, learner_view  # noqa: E402
from course_utils.book.outputs import STEPS, Where, filter_noise  # noqa: E402
from course_utils.book.runs import fmt_seconds  # noqa: E402
from course_utils.effects import effect, gain_words  # noqa: E402
from course_utils.techniques import TECHNIQUES  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RAN = ("00_measuring", "04_mixed_precision")  # what the real report runs: keep it to two
RESULTS = ROOT / "docs" / "results"


def real_report(out: Path) -> Path:
    """`course report --quick --only 00,04`, as a reader would run it (papermill, kernels)."""
    run = subprocess.run(
        [sys.executable, "-m", "course_utils", "report", "--quick", "--only", "00,04"]
        + ["--out", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert (out / "results.json").is_file(), run.stdout[-2000:] + run.stderr[-2000:]
    return out


@pytest.fixture(scope="module")
def book(tmp_path_factory):
    """The real report, and the book built from it (both slow: built once for this module)."""
    leftovers = (ROOT / "jupyter_execute").exists()
    report = real_report(tmp_path_factory.mktemp("report") / "report")
    out = tmp_path_factory.mktemp("site") / "site"
    warnings = build_book(out, report)
    return {"report": report, "out": out, "warnings": warnings, "leftovers": leftovers}


def page(book, name: str) -> str:
    return unescape((book["out"] / name).read_text(encoding="utf-8"))


def _solution_lines(name: str) -> list[str]:
    """Lines only the reference answers have (between the solution marks)."""
    learner = "\n".join(c.source for c in read(ROOT / "notebooks" / f"{name}.ipynb").cells)
    lines = []
    for cell in read(ROOT / "solutions" / f"{name}.ipynb").cells:
        body = re.search(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", cell.source, re.S)
        if body:
            lines += [ln.strip() for ln in body[1].splitlines() if len(ln.strip()) > 25]
    return [ln for ln in lines if ln not in learner]


# --- the book from a real report run ---------------------------------------------------------


def test_a_real_report_run_builds_a_book_without_warnings_and_every_internal_link_resolves(book):
    assert book["warnings"] == []
    links = check_links(book["out"])
    assert links.broken == []
    assert links.pages >= len(list((ROOT / "notebooks").glob("*.ipynb"))) + 4
    assert links.checked > 100


@pytest.mark.parametrize("lesson", RAN)
def test_the_lessons_the_report_ran_show_their_outputs_and_no_answer(book, lesson):
    html = page(book, f"{lesson}.html")
    executed = read(book["report"] / "executed" / f"{lesson}.ipynb")
    assert any("injected-parameters" in c.metadata.get("tags", []) for c in executed.cells)
    assert html.count('class="cell_output') >= 5 and "Outputs from" in html
    hidden = _solution_lines(lesson)
    assert hidden and not [ln for ln in hidden if ln in html]
    run = json.loads((book["report"] / "results.json").read_text())["runs"][lesson]
    for check in run["checks"]:
        assert f"Check {check['check']}" in html  # the neutral line stands in its place
        assert f"{check['check']}: passed" not in html
        for part in check["message"].split("; "):
            if len(part) >= 20:  # its verdict on the reference is not shown
                assert part[:60] not in html, part


def test_a_headline_effect_shows_its_metric_and_direction(book):
    html = page(book, "04_mixed_precision.html")
    assert re.search(
        r"Effect of autocast.*on time per training step.*\d\.\d\dx (faster|slower)", html
    )


def test_profiler_log_lines_are_not_published(book):
    html = page(book, "00_measuring.html")
    assert "USDT" not in html and "SyncActivityProfilerHandler" not in html
    assert "site-packages" not in html


def test_a_lesson_the_report_did_not_run_is_shown_bare_and_says_so(book):
    html = page(book, "02_batch_size.html")
    assert "did not run this lesson" in html and 'class="cell_output' not in html


def test_the_book_fails_when_a_lesson_the_report_ran_would_show_no_outputs(book, tmp_path):
    report = tmp_path / "report"
    (report / "executed").mkdir(parents=True)
    (report / "results.json").write_bytes((book["report"] / "results.json").read_bytes())
    for lesson in RAN:
        run = read(book["report"] / "executed" / f"{lesson}.ipynb")
        if lesson == "04_mixed_precision":  # solutions/ changed since the report ran
            next(c for c in run.cells if c.cell_type == "code").source += "\nprint('since')"
        nbformat.write(run, str(report / "executed" / f"{lesson}.ipynb"))
    with pytest.raises(BookError, match=r"04_mixed_precision: the report ran it.*--only 04"):
        build_book(tmp_path / "site", report)
    assert cli.main(["book", "--from", str(report), "--out", str(tmp_path / "site")]) == 2


def test_with_solutions_shows_the_answer_cells_and_the_checks_verdicts(book):
    lesson = "04_mixed_precision"
    view = learner_view(
        ROOT / "notebooks" / f"{lesson}.ipynb",
        book["report"] / "executed" / f"{lesson}.ipynb",
        with_solutions=True,
    )
    answers = [c for c in view.nb.cells if SOLUTION_MARK in c.source]
    verdicts = [o for c in view.nb.cells for o in c.get("outputs", []) if "course-check" in str(o)]
    assert view.how == "ran" and answers and verdicts


def test_the_download_and_launch_buttons_serve_the_learner_notebook(book):
    lesson = "04_mixed_precision"
    learner = (ROOT / "notebooks" / f"{lesson}.ipynb").read_bytes()
    html = page(book, f"{lesson}.html")
    assert f'href="_sources/{lesson}.ipynb"' in html
    assert (book["out"] / "_sources" / f"{lesson}.ipynb").read_bytes() == learner
    assert (book["out"] / "downloads" / f"{lesson}.ipynb").read_bytes() == learner
    assert (
        f"colab.research.google.com/github/faster-pytorch-training/course/blob/main/notebooks/{lesson}.ipynb"
        in html
    )


def test_nothing_the_build_makes_is_left_in_the_repository_or_published(book):
    assert book["leftovers"] or not (ROOT / "jupyter_execute").exists()
    assert not (book["out"] / ".doctrees").exists()
    assert not list(book["out"].rglob("*.doctree"))


def test_plots_have_alt_text_that_says_what_they_are(book):
    alts = re.findall(r'<img alt="([^"]*)" src="_images/', page(book, "04_mixed_precision.html"))
    assert alts and all(a.startswith("Figure") and not a.endswith(".png") for a in alts)


def test_the_landing_page_says_what_who_how_and_each_lessons_run_time(book):
    html = page(book, "index.html")
    for heading in ("What you will learn", "Who it is for", "How to run a lesson"):
        assert heading in html
    runs = json.loads((book["report"] / "results.json").read_text())["runs"]
    for lesson in RAN:
        assert f"{fmt_seconds(runs[lesson]['seconds'])} in this book" in html
    assert "Colab" in html and "pip install" in html


def test_the_cheat_sheet_puts_each_effect_on_the_technique_it_measured(book):
    chunks = page(book, "cheatsheet.html").split('class="cheat-card')[1:]
    cards = dict(
        re.match(r"[^>]*>\s*<p><strong>([^<]+)</strong>(.*)", c, re.S).groups() for c in chunks
    )
    assert set(cards) == {t.name for t in TECHNIQUES}
    assert "no headline effect" in cards["tensors made on the device"]
    assert "no headline effect" in cards["no bias before BatchNorm"]
    assert "inference time" in cards["conv+BN fusion for inference"]
    assert "time per training step" in cards["a training loop without the slow habits"]
    assert (
        "peak memory" in cards["activation checkpointing"]
        and "slower step" in cards["activation checkpointing"]
    )


def test_every_figure_on_the_results_page_and_cheat_sheet_says_its_direction(book):
    for name in ("results.html", "cheatsheet.html"):
        text = re.sub(r"<[^>]+>", "", page(book, name))
        figures = re.findall(r"\d+\.\d\dx(?! \()( \w+)?", text)
        assert figures and all(w.strip() in ("faster", "slower", "less", "more") for w in figures)


def test_the_results_page_lists_every_lesson_and_what_no_run_measured(book):
    html = page(book, "results.html")
    for nb in (ROOT / "notebooks").glob("*.ipynb"):
        assert f'href="{nb.stem}.html"' in html, nb.stem
    assert "not measured on these devices" in html  # 13's FSDP: no run here covers it
    assert "this book’s run" in html or "this book's run" in html


def test_qa_logs_are_not_pages_of_the_book_nor_found_by_its_search(book):
    out = book["out"]
    assert not list(out.rglob("learner-path*")) and not (out / "results").exists()
    docnames = re.search(r'"docnames":\[(.*?)\]', (out / "searchindex.js").read_text())[1]
    assert "learner-path" not in docnames and "results/" not in docnames
    assert (
        "github.com/faster-pytorch-training/course/blob/main/docs/results/learner-path-cpu.md"
        in page(book, "results.html")
    )


def test_search_indexes_the_lessons(book):
    index = (book["out"] / "searchindex.js").read_text()
    assert "autocast" in index and "glossary" in index


# --- the parts, without a build ---------------------------------------------------------------


def test_tool_log_lines_and_package_warnings_are_dropped_and_the_rest_kept():
    text = (
        "USDT:2026-12-07 08:47:10 3731:3731 SyncActivityProfilerHandler.cpp:39] profiler_start\n"
        "ERROR:2026-12-07 08:47:10 3731:3731 DeviceProperties.cpp:56] gpuGetDeviceCount failed\n"
        "/x/.venv/lib/python3.11/site-packages/torch/a.py:12: UserWarning: noise\n"
        "  warnings.warn(\n"
        "a message the lesson prints on purpose\n"
    )
    cell = nbformat.v4.new_code_cell("x")
    cell.outputs = [
        nbformat.v4.new_output("stream", name="stderr", text=text),
        nbformat.v4.new_output("stream", name="stderr", text="10%|#  | 1/10\r20%|## | 2/10"),
        nbformat.v4.new_output("stream", name="stdout", text="USDT: printed by the lesson\n"),
    ]
    filter_noise(cell, Where("a lesson"))
    assert [o["text"] for o in cell.outputs] == [
        "a message the lesson prints on purpose\n",
        "USDT: printed by the lesson\n",
    ]


def test_the_output_steps_run_noise_first_and_alt_text_last():
    """Noise goes first, so a check cell whose outputs were all noise gets no note; the note
    replaces a check's outputs whole; alt text looks at the outputs that are left."""
    assert [s.__name__ for s in STEPS] == [
        "filter_noise",
        "neutral_check",
        "effect_headline",
        "mark_wide_tables",
        "alt_text",
    ]


def test_a_run_of_another_version_is_told_apart_by_cell_id_not_by_count(book, tmp_path):
    lesson = "04_mixed_precision"
    run = read(book["report"] / "executed" / f"{lesson}.ipynb")
    changed = copy.deepcopy(run)
    changed.cells.pop(next(i for i, c in enumerate(changed.cells) if c.cell_type == "markdown"))
    changed.cells.append(nbformat.v4.new_markdown_cell("added since"))  # same count, not the same
    nbformat.write(changed, str(tmp_path / f"{lesson}.ipynb"))
    view = learner_view(ROOT / "notebooks" / f"{lesson}.ipynb", tmp_path / f"{lesson}.ipynb")
    assert view.how == "another version" and len(view.differs) == 2
    assert not any(c.get("outputs") for c in view.nb.cells if c.cell_type == "code")


def test_effects_say_which_way_their_ratio_points():
    assert gain_words(1.84, "s") == "1.84x faster"
    assert gain_words(3.44, "bytes") == "3.44x less"
    assert gain_words(0.8, "s") == "1.25x slower"
    up = effect("bigger", baseline=100, improved=150, unit="samples/s", better="higher", show=False)
    assert up.ratio == 1.5 and "1.50x higher" in up.text()


def test_sphinx_is_pinned_below_11_where_the_theme_breaks():
    text = (ROOT / "pyproject.toml").read_text()
    book_extra = re.search(r"^book = \[\n(.*?)^\]", text, re.M | re.S)[1]
    assert '"sphinx>=7,<11"' in book_extra


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
