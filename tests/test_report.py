"""`course report` runs every solution notebook and shows what each technique bought here."""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict

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
    assert all("parts" in c for c in checks)  # the report reads the check parts beside effects


def test_report_has_one_row_per_technique_with_its_effect_and_provenance(reported):
    root, _ = reported
    md = (root / "report" / "report.md").read_text()
    assert (
        "| toy_lesson | doubling by addition | not named by its notebook | time per call | 2 ms | "
        "1 ms | 2.00x (n=1, no IQR) |" in md
    )
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


# --- the pages, from synthetic results (no notebook runs) ------------------------------------


def effect_of(technique: str, ratios: list[float], **named) -> dict:
    """A headline effect as a notebook records it (Effect.to_dict())."""
    from course_utils.effects import Effect

    baseline, improved = 2e-3, 2e-3 / statistics.median(ratios)
    return Effect(
        technique, "time per training step", "s", baseline, improved, ratios, **named
    ).to_dict()


def check_of(check_id: str, *parts, status: str = "passed") -> dict:
    """A check's result as the report keeps it (course_utils.grading.read_results)."""
    return {
        "check": check_id,
        "status": status,
        "value": None,
        "threshold": None,
        "message": "; ".join(f"{p.name}: {p.message}" for p in parts),
        "parts": [asdict(p) for p in parts],
    }


@pytest.fixture
def synthetic(monkeypatch):
    """A report of four notebooks: none, one ratio, five pairs, and a speed-up the check could
    not show on this device (a busy CPU), as a 2-core machine reported them."""
    from course_utils.checks import at_least, correct, not_applicable
    from course_utils.report import NotebookRun, Report

    monkeypatch.delenv("COURSE_PLATFORM", raising=False)  # timed parts graded here
    busy = "two threads ran 0.95x as fast as one here, so no loader could show it; not timed"
    runs = {
        "00_measuring": NotebookRun(
            "00_measuring",
            "completed",
            "",
            13,
            [check_of("00-step-timer", correct("t", True, "ok"))],
        ),
        "02_batch_size": NotebookRun(
            "02_batch_size", "completed", "", 14, [], [effect_of("larger batch", [4.09])]
        ),
        "03_data_loading": NotebookRun(
            "03_data_loading",
            "completed",
            "",
            20,
            [
                check_of(
                    "03-fast-loader", correct("workers", True, "2"), not_applicable("speed", busy)
                )
            ],
            [effect_of("DataLoader workers (2)", [1.41], check="03-fast-loader/speed")],
        ),
        "04_mixed_precision": NotebookRun(
            "04_mixed_precision",
            "completed",
            "",
            10,
            [check_of("04-amp-step", at_least("speed", 1.87, 1.3, "bf16 step on the speed MLP"))],
            [
                effect_of(
                    "autocast (bfloat16)",
                    [1.9, 2.0, 2.02, 2.1, 2.2],
                    workload="the speed MLP's training step, float32 vs autocast",
                    check="04-amp-step/speed",
                )
            ],
        ),
    }
    env = {"device_class": "cpu-bf16", "device_name": "AMD EPYC", "torch": "2.x"}
    return Report(env, True, "2026-01-01 00:00 UTC", "course report --quick", runs)


def pages(result, tmp_path) -> tuple[str, str]:
    from course_utils.report import write

    write(result, tmp_path)
    return (tmp_path / "report.md").read_text(), (tmp_path / "report.html").read_text()


def test_each_effect_states_the_n_it_rests_on(synthetic, tmp_path):
    md, html = pages(synthetic, tmp_path)
    assert "2.02x (IQR 2.00-2.10, n=5)" in md and "2.02x (IQR 2.00-2.10, n=5)" in html
    assert "4.09x (n=1, no IQR)" in md and "4.09x (n=1, no IQR)" in html


def test_an_effect_of_one_ratio_claims_no_iqr_and_draws_no_error_bar(synthetic):
    """Is a single ratio drawn without whiskers (a zero-width bar claims a certainty), and
    labelled n=1?"""
    from matplotlib.container import ErrorbarContainer

    from course_utils.plots import effect_bars
    from course_utils.report import all_headlines

    found = all_headlines(synthetic)
    assert [h.iqr is None for h in found] == [True, True, False]
    fig = effect_bars(
        [h.notebook for h in found],
        [h.ratio for h in found],
        [h.iqr for h in found],
        [h.n for h in found],
        [h.shown for h in found],
        title="t",
    )
    ax = fig.axes[0]
    assert len([c for c in ax.containers if isinstance(c, ErrorbarContainer)]) == 1
    words = [t.get_text() for t in ax.texts]
    assert words[0] == "4.09x, n=1, no IQR" and "IQR 2.00-2.10, n=5" in words[2]


def test_the_method_line_says_what_was_done_for_pairs_and_single_ratios(synthetic, tmp_path):
    from course_utils.headlines import MEANING

    md, _ = pages(synthetic, tmp_path)
    assert MEANING in md
    assert (
        "for n >= 2, the median of n baseline/improved ratios (for times, interleaved pairs"
        in MEANING
        and "for n = 1, one ratio" in MEANING
    )
    assert "(median of interleaved pairs, IQR in brackets)" not in md  # the old, untrue line


def test_html_carries_the_checks_table_and_the_meaning_line(synthetic, tmp_path):
    import html as h

    from course_utils.headlines import MEANING

    md, page = pages(synthetic, tmp_path)
    assert h.escape(MEANING) in page
    assert "<h2>Checks</h2>" in page
    for check in ("00-step-timer", "03-fast-loader", "04-amp-step"):
        assert f"<td>{check}</td>" in page and f"| {check} |" in md


def test_a_notebook_without_an_effect_says_no_headline_effect_not_0_effects(synthetic, tmp_path):
    from course_utils.report import effect_count

    md, page = pages(synthetic, tmp_path)
    assert "| 00_measuring | no headline effect |" in md and "no headline effect" in page
    assert "0 effect" not in md + page
    runs = synthetic.runs
    assert effect_count(runs["00_measuring"]) == "no headline effect"
    assert effect_count(runs["02_batch_size"]) == "1 headline effect"


def test_each_effect_names_its_workload_and_shows_the_checks_figure_beside(synthetic, tmp_path):
    """04: the table's 2.02x and the check's 1.87x are two runs; the row says which is which."""
    md, page = pages(synthetic, tmp_path)
    [row] = [line for line in md.splitlines() if line.startswith("| 04_mixed_precision | autocast")]
    assert "the speed MLP's training step" in row
    assert "1.87x by check 04-amp-step (speed), passed" in row
    assert (
        "check 04-amp-step (speed), in its own run, measured bf16 step on the speed MLP: 1.87x"
        in md
    )
    assert "1.87x by check 04-amp-step (speed), passed" in page


def test_an_effect_its_check_could_not_show_here_is_marked_with_the_checks_reason(
    synthetic, tmp_path
):
    md, page = pages(synthetic, tmp_path)
    [row] = [line for line in md.splitlines() if line.startswith("| 03_data_loading | DataLoader")]
    assert "1.41x (n=1, no IQR), not shown on this device" in row
    assert "not applicable on this device, says check 03-fast-loader (speed)" in row
    assert "no loader could show it; not timed" in row
    assert "not shown on this device" in page


def test_a_speed_part_skipped_because_the_check_failed_is_not_blamed_on_the_device():
    from course_utils.checks import correct, not_applicable
    from course_utils.headlines import effect_text, headlines

    skipped = not_applicable("speed", "not timed: the results differ from slow_train's")
    checks = [
        check_of("10-fast-train", correct("same results", False, "no"), skipped, status="failed")
    ]
    e = effect_of("fixing the habits", [15.27], check="10-fast-train/speed")
    [h] = headlines("10_habits", [e], checks)
    assert h.check is not None and h.check.status == "not-applicable"
    assert h.shown and effect_text(h) == "15.27x (n=1, no IQR)"


def test_an_effect_that_names_its_workload_and_check_is_read_as_it_says(monkeypatch):
    from course_utils.checks import at_least
    from course_utils.headlines import check_text, headlines

    monkeypatch.delenv("COURSE_PLATFORM", raising=False)
    e = effect_of("x", [3.0], workload="my own loop", check="11-speedrun/time to target")
    checks = [check_of("11-speedrun", at_least("time to target", 3.07, 1.5, "baseline / yours"))]
    [h] = headlines("11_capstone", [e], checks)
    assert h.workload == "my own loop" and check_text(h).startswith("3.07x by check 11-speedrun")


def test_effect_records_n_and_the_ratios_of_the_rounds_it_summarises():
    from course_utils.effects import effect

    e = effect("habits", baseline=0.05, improved=0.003, ratios=[15.0, 16.0, 17.0], show=False)
    assert e.n == 3 and e.to_dict()["n"] == 3 and "n=3 pairs" in e.text()
    one = effect("habits", baseline=0.05, improved=0.005, show=False)
    assert one.n == 1 and "n=1: one ratio, no spread measured" in one.text()


def run_of(name: str, effects: list[dict]):
    from course_utils.report import NotebookRun

    return NotebookRun(name, "completed", "", 1, [], effects)


def test_an_effect_recorded_without_workload_or_check_is_shown_as_unnamed_in_any_notebook():
    """No hand-kept table fills in what a notebook did not say: its row says so."""
    import course_utils.headlines as headlines_module
    from course_utils.checks import at_least
    from course_utils.headlines import check_text, headlines

    assert not hasattr(headlines_module, "LINKS")
    checks = [check_of("04-amp-step", at_least("speed", 1.87, 1.3, "bf16 step"))]
    [h] = headlines("04_mixed_precision", [effect_of("autocast", [2.0])], checks)
    assert h.workload == "" and h.check is None and check_text(h) == ""
    [row] = headlines_module.technique_rows(
        {"04_mixed_precision": run_of("04_mixed_precision", [effect_of("autocast", [2.0])])}
    )
    assert row["workload"] == "not named by its notebook" and row["check's figure"] == ""


# --- what the solution notebooks pass to cu.effect (read statically, no kernel) ---------------

# notebooks whose effect rests on interleaved rounds they time themselves (not a cu.compare)
ROUNDS = ("06_ddp", "10_habits")


def effect_calls() -> dict[str, dict]:
    """Each solution notebook's cu.effect calls: {notebook: {keyword: its source}}; a notebook's
    second and later calls (lesson 12 reports three techniques) are keyed "<notebook>#2", ..."""
    import ast
    from pathlib import Path

    calls = {}
    for path in sorted((Path(__file__).parents[1] / "solutions").glob("*.ipynb")):
        for cell in read(path).cells:
            if cell.cell_type != "code" or "cu.effect(" not in cell.source:
                continue
            for node in ast.walk(ast.parse(cell.source)):
                func = getattr(node, "func", None)
                if isinstance(func, ast.Attribute) and func.attr == "effect":
                    key, n = path.stem, 1
                    while key in calls:
                        n += 1
                        key = f"{path.stem}#{n}"
                    calls[key] = {
                        k.arg: ast.get_source_segment(cell.source, k.value) for k in node.keywords
                    }
    return calls


def test_every_solution_notebooks_effect_names_its_workload():
    calls = effect_calls()
    assert len(calls) >= 8, sorted(calls)
    unnamed = [nb for nb, keywords in calls.items() if "workload" not in keywords]
    assert not unnamed, f"cu.effect without workload= in {unnamed}"


def test_each_effects_check_names_a_registered_check_and_one_of_its_parts():
    import ast
    import importlib
    import inspect
    import pkgutil

    import course_utils.lessons
    from course_utils.checks import REGISTRY

    for module in pkgutil.iter_modules(course_utils.lessons.__path__):
        importlib.import_module(f"course_utils.lessons.{module.name}")
    refs = {nb: kw["check"] for nb, kw in effect_calls().items() if "check" in kw}
    assert {"03", "04", "07", "09", "10", "11"} <= {nb[:2] for nb in refs}
    for nb, ref in refs.items():
        check_id, _, part = ast.literal_eval(ref).partition("/")
        assert check_id.startswith(nb[:2]) and check_id in REGISTRY, (nb, ref)
        source = inspect.getsource(inspect.getmodule(inspect.unwrap(REGISTRY[check_id])))
        assert f'"{part}"' in source, f"{nb}: {check_id} has no part named {part!r}"


def test_notebooks_that_time_interleaved_rounds_record_one_ratio_per_round():
    """10 and 06 time their rounds themselves: the effect's n is the rounds, not one ratio of
    medians."""
    calls = effect_calls()
    for nb in ROUNDS:
        assert "ratios" in calls[nb], f"{nb}: its rounds' ratios are not passed to cu.effect"
        assert "zip(" in calls[nb]["ratios"], calls[nb]["ratios"]  # pairs, round by round
