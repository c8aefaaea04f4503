"""course_utils.learner_run: what a learner's Run All showed, read from the executed cells."""

from __future__ import annotations

from pathlib import Path

import nbformat

from course_utils import learner_run
from course_utils.authoring import code, read
from course_utils.checks import USES_REFERENCE

ROOT = Path(__file__).resolve().parents[1]


def test_the_learner_env_has_no_test_runner_and_no_forced_mode(monkeypatch):
    monkeypatch.setenv("PYTEST_VERSION", "8.4")
    monkeypatch.setenv("COURSE_QUICK", "1")
    env = learner_run.learner_env()
    assert "PYTEST_VERSION" not in env and "COURSE_QUICK" not in env
    assert env["COURSE_DATASET"] == "offline"
    assert learner_run.learner_env(COURSE_QUICK="0")["COURSE_QUICK"] == "0"


def test_a_check_grading_two_exercise_cells_solves_both_in_a_half_solved_copy():
    """01's range test check takes lr_range_test and suggest_lr, written in two cells."""
    solution = read(ROOT / "solutions" / "01_one_cycle.ipynb")
    groups = dict(learner_run.exercises_by_check(solution))
    assert len(groups["01-lr-range"]) == 2
    nb, solved = learner_run.half_solved(solution, "01_one_cycle.ipynb")
    assert "01-lr-range" in solved
    for i in groups["01-lr-range"]:
        assert nb.cells[i].source == solution.cells[i].source
    unsolved = [c for c, _ in groups.items() if c not in solved]
    assert unsolved and all(
        "raise NotImplementedError()" in nb.cells[i].source for c in unsolved for i in groups[c]
    )


def test_a_bar_left_short_of_its_total_is_stale_and_a_finished_one_is_not():
    stale = "check: interleaved runs   0%|   | 0/6 [00:00<?, ?it/s]"
    done = "race: 100%|####| 12/12 [00:09<00:00, 1.3it/s]"
    redrawn = "race:  50%|##  | 6/12 [00:04<00:04]\rrace: 100%|####| 12/12 [00:09<00:00]"
    assert learner_run._stale_bars(stale) == [stale]
    assert learner_run._stale_bars(done) == []
    assert learner_run._stale_bars(redrawn) == []


def test_a_cell_is_summarised_with_its_verdict_error_and_reference_notice():
    cell = code("lesson.check_x(f)")
    cell.outputs = [
        nbformat.v4.new_output(
            "stream",
            name="stdout",
            text=f"(throughput_sweep is not written yet: {USES_REFERENCE}.)\n",
        ),
        nbformat.v4.new_output(
            "display_data",
            data={"application/vnd.course-check+json": {"check_id": "x", "status": "failed"}},
        ),
        nbformat.v4.new_output("error", ename="NameError", evalue="races", traceback=[]),
    ]
    run = learner_run.summarise(3, cell, seconds=2.0, first_output_s=0.1)
    assert run.reference_for == ["throughput_sweep"]
    assert run.verdicts == {"x": "failed"}
    assert run.error == "NameError"
