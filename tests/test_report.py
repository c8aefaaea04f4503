"""`course report` runs every solution notebook and shows what each technique bought here."""

from __future__ import annotations

import json

import pytest
from grading_fixtures import TOY, make_course

from course_utils.authoring import code, read, write
from course_utils.report import report

pytestmark = pytest.mark.timeout(600)


def with_effect(solutions):
    """The toy lesson records a headline effect, as every lesson's notebook does."""
    nb = read(solutions / TOY)
    nb.cells.append(
        code(
            "import course_utils as cu\n"
            "cu.effect('doubling by addition', metric='time per call', baseline=2e-3, "
            "improved=1e-3, expected='2x')"
        )
    )
    write(nb, solutions / TOY)


@pytest.fixture(scope="module")
def reported(tmp_path_factory):
    """The toy course reported once, with an inherited MPLBACKEND=Agg (which must not replace
    the kernel's inline backend, the one that turns figures into image outputs)."""
    root = tmp_path_factory.mktemp("report")
    solutions, _ = make_course(root)
    with_effect(solutions)
    mp = pytest.MonkeyPatch()
    mp.setenv("MPLBACKEND", "Agg")
    try:
        result = report(solutions=solutions, out=root / "report", quick=True, timeout=120)
    finally:
        mp.undo()
    return root, result


def test_report_runs_each_solution_and_tabulates_its_checks(reported):
    root, result = reported
    data = json.loads((root / "report" / "results.json").read_text())
    checks = data["runs"]["toy_lesson"]["checks"]
    assert [(c["check"], c["status"]) for c in checks] == [
        ("toy-double", "passed"),
        ("toy-square", "passed"),
    ]
    assert result.ok and data["ok"] is True
    assert "2/2 checks passed" in result.summary()
    assert "| toy_lesson | toy-double | passed |" in (root / "report" / "report.md").read_text()


def test_report_has_one_row_per_technique_with_its_effect_and_provenance(reported):
    root, _ = reported
    md = (root / "report" / "report.md").read_text()
    assert "| toy_lesson | doubling by addition | time per call | 2 ms | 1 ms | 2.00x |" in md
    data = json.loads((root / "report" / "results.json").read_text())
    assert data["env"]["device_class"] and data["command"] == "course report --quick"
    [effect] = data["runs"]["toy_lesson"]["effects"]
    assert effect["ratios"] == [2.0] and effect["env"]["torch"]


def test_report_keeps_the_figures_and_inlines_them_in_html(reported):
    root, result = reported
    assert result.runs["toy_lesson"].plots
    assert list((root / "report" / "plots").glob("toy_lesson-*.png"))
    assert (root / "report" / "summary.png").exists()
    html = (root / "report" / "report.html").read_text()
    assert html.count("data:image/png;base64,") >= 2  # the summary and the notebook's figure


def test_a_failing_notebook_is_reported_and_the_report_completes(tmp_path):
    solutions, _ = make_course(tmp_path)
    nb = read(solutions / TOY)
    nb.cells.insert(1, code("import os\nos._exit(3)"))  # the kernel dies
    write(nb, solutions / "crash_lesson.ipynb")
    result = report(
        solutions=solutions, out=tmp_path / "report", quick=True, timeout=60, only=["crash"]
    )
    assert not result.ok
    run = result.runs["crash_lesson"]
    assert run.outcome == "kernel-died" and {c["status"] for c in run.checks} == {"missing"}
    md = (tmp_path / "report" / "report.md").read_text()
    assert "crash_lesson | (notebook) | kernel-died" in md


def test_only_reruns_a_subset_and_merges_with_earlier_results(reported, tmp_path):
    root, first = reported
    out = tmp_path / "merged"
    out.mkdir()
    (out / "results.json").write_text((root / "report" / "results.json").read_text())
    solutions = root / "solutions"
    write(read(solutions / TOY), solutions / "zz_second.ipynb")
    merged = report(solutions=solutions, out=out, quick=True, timeout=120, only=["zz"])
    assert set(merged.runs) == {"toy_lesson", "zz_second"}
    (solutions / "zz_second.ipynb").unlink()


def test_reference_results_are_named_by_device_class_and_device(reported, tmp_path):
    from course_utils.report import publish, reference_name

    root, result = reported
    path = publish(result, root / "report", tmp_path / "results")
    assert path.name == reference_name(result.env) + ".md"
    assert path.name.startswith(result.env["device_class"] + "-")
    assert (tmp_path / "results" / (path.stem + ".json")).exists()
