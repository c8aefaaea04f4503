"""`course report` runs every solution notebook and tabulates what its checks measured."""

from __future__ import annotations

import csv

from grading_fixtures import make_course

from course_utils.report import report


def test_report_runs_each_solution_and_writes_results_table(tmp_path):
    solutions, _ = make_course(tmp_path)
    text = report(solutions=solutions, out=tmp_path / "report", quick=True, timeout=120)
    with open(tmp_path / "report" / "results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [(r["check"], r["status"]) for r in rows] == [
        ("toy-double", "passed"),
        ("toy-square", "passed"),
    ]
    assert "2/2 checks passed" in text
    assert "| toy_lesson | toy-double | passed |" in (tmp_path / "report" / "report.md").read_text()


def test_report_keeps_the_figures_the_notebooks_draw(tmp_path, monkeypatch):
    """An inherited MPLBACKEND=Agg must not replace the kernel's inline backend, which is what
    turns a figure into an image output."""
    monkeypatch.setenv("MPLBACKEND", "Agg")
    solutions, _ = make_course(tmp_path)
    report(solutions=solutions, out=tmp_path / "report", quick=True, timeout=120)
    assert list((tmp_path / "report" / "plots").glob("*.png"))
    executed = (tmp_path / "report" / "executed" / "toy_lesson.ipynb").read_text()
    assert "image/png" in executed
