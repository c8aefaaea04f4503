"""Shared test setup: the offline data set, quick mode, and no state leaking between tests.

Tests never download: COURSE_DATASET=offline. Workloads are small: COURSE_QUICK=1. Both are
set in os.environ when pytest loads this file, so that processes the tests start (spawned
DataLoader workers, notebook kernels) inherit them, and again per test, in case a test
changed them.

CI's tier (README, Contributing): `.ci/run` must stay within 30 minutes on a 2-core machine,
so some costly cases run only with COURSE_TESTS=all (pytest_collection_modifyitems): of a test
that grades through the judge in a kernel of its own (its name says judged, judge or
remotely: 5-30 s a case), and of the timed checks' tests in FIRST_CASE_ONLY, CI runs the first
case; the tests in LONG_TIER (re-measurements of a threshold's evidence, repeats of what another
test runs) run only in the long tier.
"""

from __future__ import annotations

import os
import re

import pytest
import torch

os.environ["COURSE_DATASET"] = "offline"
os.environ["COURSE_QUICK"] = "1"


@pytest.fixture(autouse=True)
def course_env(monkeypatch):
    """Offline data and quick mode for every test; torch's thread count and the forced quick
    mode are put back afterwards."""
    from course_utils import mode

    monkeypatch.setenv("COURSE_DATASET", "offline")
    monkeypatch.setenv("COURSE_QUICK", "1")
    mode.set_quick(None)
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)
    mode.set_quick(None)


@pytest.fixture
def one_thread():
    """torch on one thread for this test (restored by `course_env`).

    On a 2-core machine shared with other jobs, a single-threaded kernel is timed far more
    steadily than one that needs both cores at once.
    """
    torch.set_num_threads(1)
    return 1


@pytest.fixture(scope="session")
def toy_graded(tmp_path_factory):
    """The toy lesson's scenario submissions (tests/grading_fixtures.py) graded once on this
    machine, two at a time, shared by test_grading, test_cluster and test_shards. `files`
    holds the bytes written, taken before any test grades into the same folder again."""
    import csv
    import hashlib

    from grading_fixtures import CELL_TIMEOUT, make_course, snapshot

    from course_utils.grading import grade

    root = tmp_path_factory.mktemp("course")
    solutions, subs = make_course(root)
    before = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in subs.iterdir()}
    summary = grade(
        [subs], out=root / "out", solutions=solutions, cell_timeout=CELL_TIMEOUT, jobs=2
    )
    with open(root / "out" / "grades.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return {
        "root": root,
        "subs": subs,
        "solutions": solutions,
        "summary": summary,
        "rows": rows,
        "before": before,
        "files": snapshot(root / "out"),
    }


ALL = os.environ.get("COURSE_TESTS") == "all"
JUDGED = re.compile(r"judged|the_judge|remotely")
LONG_TIER = {  # test function -> why CI leaves it to COURSE_TESTS=all
    "tests/test_lesson_13.py::test_each_scenario_budget_has_room_on_both_sides": "a "
    "threshold's evidence, re-measured on every plan (24 s)",
    "tests/test_lesson_08.py::test_accum_atol_passes_the_reference_on_every_specimen_and_no_"
    "mistake_where_it_differs": "a threshold's evidence on every specimen (18 s)",
    "tests/test_lesson_00_attacks.py::test_step_timer_fails_the_attacks_under_fresh_draws": "its "
    "attacks are graded judged in CI (test_judged_remotely_the_attacks_fail, first case)",
    "tests/test_lesson_06.py::test_ddp_check_passes_the_solution_script": "the solution's "
    "launch is graded judged in CI (test_the_solution_passes_when_judged_outside_...)",
    "tests/test_lesson_06.py::test_ddp_check_names_a_forgotten_set_epoch": "the colleague's "
    "script, graded in CI, has this fault among its three",
    "tests/test_lesson_06.py::test_ddp_check_names_the_global_batch_used_on_every_rank": "the "
    "colleague's script, graded in CI, has this fault among its three",
    "tests/test_lesson_10.py::test_fast_train_check_passes_the_reference_fix": "the judged test "
    "passes the reference in CI",
    "tests/test_lesson_00_attacks.py::test_step_timer_passes_the_reference_under_fresh_draws": "3 "
    "timed runs (12 s); the judged test passes the reference under a fresh draw in CI",
    "tests/test_lesson_11.py::test_the_reference_speedrun_reaches_the_target_faster_than_the_"
    "baseline": "a threshold's evidence (3 pairs, 23 s); the judged test passes the reference "
    "on one pair in CI",
}


# Parametrized tests whose every case costs seconds (CI at 8cb8d60: 4-8 s a case on the 2-core
# machine) and exercises the same machinery: CI runs the first case, as for a judged test, and
# COURSE_TESTS=all the rest.
TIMED = "a timed check, about 5 s a case"
FIRST_CASE_ONLY = {
    "tests/test_lesson_00.py::test_step_timer_check_closes_issue_34s_holes_and_names_the_cause": TIMED,
    "tests/test_lesson_00.py::test_step_timer_check_names_ignored_arguments_and_the_statistic": TIMED,
    "tests/test_lesson_00.py::test_step_timer_check_fails_and_names_the_mistake": TIMED,
    "tests/test_lesson_00.py::test_slowest_op_check_fails_and_names_the_mistake": "a profiled step",
    "tests/test_lesson_02.py::test_throughput_sweep_fails_miscounts_steps_per_second_one_step_and_"
    "cold_timing": TIMED,
    "tests/test_lesson_10.py::test_fast_train_check_fails_a_single_fix_on_speed_naming_the_"
    "biggest_remaining_cost": "a timed check, 12 s a case",
    "tests/test_lesson_14.py::test_compile_plan_fails_the_half_understood_answers": "compiles",
    "tests/test_forgery.py::test_a_forgery_earns_nothing_on_gradescope_either": "an autograder "
    "run each; test_forgery grades these forgeries through `course grade` in CI",
}  # fmt: skip


def pytest_collection_modifyitems(config, items):
    """CI's tier: see the module docstring. The skipped cases say how to run them."""
    if ALL:
        return
    later = pytest.mark.skip(reason="a further case of a judged test: COURSE_TESTS=all runs it")
    seen: set[str] = set()
    for item in items:
        function = item.nodeid.split("[")[0]
        if function in LONG_TIER:
            reason = f"long tier ({LONG_TIER[function]}): COURSE_TESTS=all runs it"
            item.add_marker(pytest.mark.skip(reason=reason))
        elif "[" in item.nodeid and function in FIRST_CASE_ONLY:
            if function in seen:
                reason = f"a further case ({FIRST_CASE_ONLY[function]}): COURSE_TESTS=all runs it"
                item.add_marker(pytest.mark.skip(reason=reason))
            seen.add(function)
        elif "[" in item.nodeid and JUDGED.search(function.rsplit("::", 1)[-1]):
            if function in seen:
                item.add_marker(later)
            seen.add(function)
