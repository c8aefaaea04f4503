"""`course grade` on a toy lesson made by code: every scenario of the grading contract.

The whole folder of fixture submissions is graded once (module fixture); each test then asks
one question of the grades. The cell limit (grading_fixtures.CELL_TIMEOUT) leaves room for
torch's import while keeping the hanging scenario short.
"""

from __future__ import annotations

import copy
import csv
import hashlib
import json

import pytest
from grading_fixtures import CELL_TIMEOUT, TOY, make_course

from course_utils.authoring import learner_copy, read
from course_utils.grading import grade
from course_utils.grading.restore import restore_checks

pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def graded(toy_graded):
    """Every scenario graded once per session (conftest.toy_graded)."""
    return toy_graded


def status(graded, submission: str, check: str) -> dict:
    name = f"{submission}_{TOY}"
    return next(r for r in graded["rows"] if r["submission"] == name and r["check"] == check)


def test_grades_csv_has_the_contract_columns(graded):
    with open(graded["root"] / "out" / "grades.csv", newline="") as f:
        header = next(csv.reader(f))
    assert header == [
        "submission",
        "notebook",
        "check",
        "status",
        "points",
        "max_points",
        "value",
        "threshold",
        "device_class",
        "message",
    ]


def test_grade_marks_solved_notebook_passed(graded):
    for check, points in (("toy-double", "1.0"), ("toy-square", "2.0")):
        row = status(graded, "solved", check)
        assert (row["status"], row["points"]) == ("passed", points)


def test_grade_marks_untouched_notebook_not_attempted(graded):
    assert {status(graded, "untouched", c)["status"] for c in ("toy-double", "toy-square")} == {
        "not-attempted"
    }


def test_grade_fails_only_the_wrong_exercise(graded):
    assert status(graded, "solved_wrong_square", "toy-square")["status"] == "failed"
    assert "returned 8" in status(graded, "solved_wrong_square", "toy-square")["message"]
    assert status(graded, "solved_wrong_square", "toy-double")["status"] == "passed"


def test_grade_goes_on_past_a_cell_that_raises(graded):
    assert status(graded, "solved_raise_early", "toy-double")["status"] == "passed"
    assert status(graded, "solved_raise_early", "toy-square")["status"] == "passed"


def test_grade_marks_hanging_notebook_timeout(graded):
    row = status(graded, "solved_hang", "toy-square")
    assert row["status"] == "timeout" and f"{CELL_TIMEOUT} s" in row["message"]
    assert status(graded, "solved_hang", "toy-double")["status"] == "passed"


def test_grade_marks_checks_after_dead_kernel_missing(graded):
    row = status(graded, "solved_dies", "toy-square")
    assert row["status"] == "missing" and "kernel died" in row["message"]
    assert status(graded, "solved_dies", "toy-double")["status"] == "passed"


def test_grade_gives_an_unreadable_file_zero_of_its_lessons_points(graded):
    """Its lesson told by its file name: a row per check at 0 of its points, and the fix."""
    rows = [r for r in graded["rows"] if r["submission"] == f"corrupt_{TOY}"]
    assert [r["check"] for r in rows] == ["toy-double", "toy-square"]
    assert {r["status"] for r in rows} == {"error"}
    assert sum(float(r["max_points"]) for r in rows) == 3
    assert all(
        "not a readable notebook" in r["message"] and "Download" in r["message"] for r in rows
    )
    summary = (graded["root"] / "out" / "summary.csv").read_text()
    assert f"corrupt_{TOY},toy_lesson,0,3,0.0" in summary


def test_an_unreadable_file_counts_against_the_lesson_given_by_flag(tmp_path):
    solutions, _ = make_course(tmp_path)
    sub = tmp_path / "frank_homework.ipynb"
    sub.write_text("{ not json", encoding="utf-8")
    out = tmp_path / "out"
    grade([sub], out=out, solutions=solutions, cell_timeout=CELL_TIMEOUT)
    assert "frank_homework.ipynb,,0,0," in (out / "summary.csv").read_text()  # lesson unknown
    grade([sub], out=out, solutions=solutions, cell_timeout=CELL_TIMEOUT, lesson="toy_lesson")
    assert "frank_homework.ipynb,toy_lesson,0,3,0.0" in (out / "summary.csv").read_text()


def test_grade_restores_deleted_and_weakened_checks(graded):
    assert status(graded, "solved_tampered", "toy-double")["status"] == "passed"
    assert status(graded, "solved_tampered", "toy-square")["status"] == "passed"
    text = (
        graded["root"] / "out" / "feedback" / f"solved_tampered_{TOY.removesuffix('.ipynb')}.md"
    ).read_text()
    assert "edited this locked check cell" in text and "was missing from your notebook" in text


def test_a_displayed_forged_result_earns_nothing_and_honest_work_still_counts(graded):
    """The forged notebook solves double and displays a pass for square: the judge decides
    both, so double passes and square is not attempted; the feedback notes the forgery."""
    assert status(graded, "forged", "toy-double")["status"] == "passed"
    row = status(graded, "forged", "toy-square")
    assert row["status"] == "not-attempted" and float(row["points"]) == 0
    text = graded["root"] / "out" / "feedback" / f"forged_{TOY.removesuffix('.ipynb')}.md"
    assert "cell 9: line 2" in text.read_text() and "changes nothing" in text.read_text()


def test_grade_never_changes_a_submission(graded):
    after = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in graded["subs"].iterdir()}
    assert after == graded["before"]


def test_grade_writes_summary_feedback_and_executed_notebooks(graded):
    out = graded["root"] / "out"
    with open(out / "summary.csv", newline="") as f:
        summary = {r["submission"]: r for r in csv.DictReader(f)}
    assert summary[f"solved_{TOY}"]["percent"] == "100.0"
    assert summary[f"untouched_{TOY}"]["percent"] == "0.0"
    assert (out / "feedback" / "solved_toy_lesson.md").read_text().startswith("# Feedback")
    assert (out / "executed" / "solved_toy_lesson.ipynb").exists()


def test_grade_reuses_unchanged_submissions(graded):
    root = graded["root"]
    summary = grade(
        [graded["subs"] / f"solved_{TOY}"],
        out=root / "out",
        solutions=graded["solutions"],
        cell_timeout=CELL_TIMEOUT,
    )
    assert summary.reused == 1


def test_restore_tags_only_the_first_claim_of_a_check(graded):
    sol = read(graded["solutions"] / TOY)
    sub = learner_copy(sol, TOY)
    sub.cells.append(copy.deepcopy(sub.cells[4]))  # a second cell claiming toy-double
    restored, _ = restore_checks(sub, sol, "toy_lesson")
    tagged = [
        c for c in restored.cells if c.metadata.get("course", {}).get("check") == "toy-double"
    ]
    assert len(tagged) == 1
    assert json.dumps(restored.cells[-1].metadata).count("nbgrader") == 0


def test_grade_rejects_missing_path(tmp_path):
    from course_utils.errors import UsageError

    with pytest.raises(UsageError, match="no such file"):
        grade([tmp_path / "nope"], out=tmp_path / "out", solutions=tmp_path)


def test_grading_settings_change_with_the_harness_code_and_the_device_class(tmp_path, monkeypatch):
    """A fixed threshold or check body, or another device class, must not reuse old grades."""
    from course_utils import device
    from course_utils.grading import settings as grading

    sol = tmp_path / "toy.ipynb"
    sol.write_text("{}")
    harness = tmp_path / "harness"
    harness.mkdir()
    (harness / "checks.py").write_text("THRESHOLD = 1.5\n")
    before = grading.grading_settings([sol], 40, True, harness=harness)
    (harness / "checks.py").write_text("THRESHOLD = 1.3\n")
    after_fix = grading.grading_settings([sol], 40, True, harness=harness)
    monkeypatch.setattr(device, "device_class", lambda d=None: "cuda-tensorcore")
    other_device = grading.grading_settings([sol], 40, True, harness=harness)
    assert len({before, after_fix, other_device}) == 3


def test_regrading_after_a_check_changed_grades_again(graded, monkeypatch):
    from course_utils.grading import serial

    monkeypatch.setattr(serial, "grading_settings", lambda *a, **k: "a threshold was fixed")
    sub = graded["subs"] / f"solved_{TOY}"
    summary = grade(
        [sub], out=graded["root"] / "out", solutions=graded["solutions"], cell_timeout=CELL_TIMEOUT
    )
    assert summary.reused == 0


def test_parallel_grading_touches_its_state_only_from_the_main_thread(tmp_path, monkeypatch):
    """Worker threads return their results; only the main thread updates and saves the state
    (a dict mutated while json.dumps iterates it fails at random)."""
    import threading
    import time as _time

    from course_utils.grading import outbox, serial
    from course_utils.grading.records import Graded, Row

    seen_gpus, dumped_from = [], set()

    def fake_grade_submission(name, filename, data, sols, run, **kw):
        seen_gpus.append(kw["gpu"])
        _time.sleep(0.05)
        return Graded([Row(name, "toy", "toy-double", "passed", 1, 1, None, None, "cpu", "")])

    real_dumps = outbox.json.dumps

    def dumps(obj, **kw):
        dumped_from.add(threading.current_thread() is threading.main_thread())
        return real_dumps(obj, **kw)

    monkeypatch.setattr(serial, "grade_submission", fake_grade_submission)
    monkeypatch.setattr(serial, "gpu_count", lambda: 2)
    monkeypatch.setattr(outbox.json, "dumps", dumps)
    solutions, subs = make_course(tmp_path)
    grade([subs], out=tmp_path / "out", solutions=solutions, jobs=3)
    assert dumped_from == {True}
    assert set(seen_gpus) <= {0, 1} and len(seen_gpus) == len(list(subs.iterdir()))


def test_an_interrupted_run_continues_from_its_state_file(tmp_path, monkeypatch):
    """Ctrl-C mid-run: what was graded is in the state file, and a rerun grades only the rest."""
    from course_utils.grading import outbox, serial
    from course_utils.grading.records import Graded, Row

    calls = []

    def fake_grade_submission(name, filename, data, sols, run, **kw):
        calls.append(name)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return Graded([Row(name, "toy", "toy-double", "passed", 1, 1, None, None, "cpu", "")])

    monkeypatch.setattr(serial, "grade_submission", fake_grade_submission)
    monkeypatch.setattr(serial, "grading_settings", lambda *a, **k: "fixed")
    solutions, subs = make_course(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        grade([subs], out=tmp_path / "out", solutions=solutions)
    state = json.loads((tmp_path / "out" / outbox.STATE_FILE).read_text())
    assert list(state) == calls[:1]
    summary = grade([subs], out=tmp_path / "out", solutions=solutions)
    assert summary.reused == 1 and summary.submissions == len(list(subs.iterdir()))


def test_ctrl_c_stops_the_notebook_in_flight_at_once_and_leaves_nothing_behind(tmp_path):
    """SIGINT to `course grade` while a kernel sleeps: it exits within seconds (not when the
    cell ends), with no grading process or work folder left and a whole state file."""
    import signal
    import subprocess
    import sys
    import tempfile
    import time as _time
    from pathlib import Path

    import psutil

    from course_utils.authoring import code, read, write

    solutions, scenarios = make_course(tmp_path)
    subs = tmp_path / "subs"
    subs.mkdir()
    write(read(scenarios / f"solved_{TOY}"), subs / f"a_solved_{TOY}")
    sleeper = read(scenarios / f"solved_{TOY}")  # it marks its own folder (the sandbox's)
    sleeper.cells.insert(3, code("import time\n\nopen('asleep', 'w').close()\ntime.sleep(60)"))
    write(sleeper, subs / f"b_sleeper_{TOY}")
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "course_utils", "grade", str(subs), "--out", str(out)]
    cmd += ["--solutions", str(solutions), "--timeout", "120"]

    # a job started in the background of a non-interactive shell (a CI runner may do so)
    # inherits SIGINT ignored, and Python then keeps ignoring it: a terminal's Ctrl-C is not
    def as_from_a_terminal() -> None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True, preexec_fn=as_from_a_terminal)
    grader = psutil.Process(proc.pid)
    work = Path(tempfile.gettempdir())
    deadline = _time.time() + 120
    while _time.time() < deadline and not list(work.glob(f"course-grade-{proc.pid}-*/box/asleep")):
        _time.sleep(0.3)  # until the sleeper's kernel sleeps
    kids = grader.children(recursive=True)
    started = _time.perf_counter()
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert _time.perf_counter() - started < 8, err
    assert proc.returncode == 130 and "interrupted" in err
    assert not [k.pid for k in kids if k.is_running() and k.status() != psutil.STATUS_ZOMBIE]
    assert not list(Path(tempfile.gettempdir()).glob(f"course-grade-{proc.pid}-*"))
    assert list(json.loads((out / ".grading-state.json").read_text())) == [f"a_solved_{TOY}"]


def test_a_loud_notebook_is_stored_capped_and_says_how_much_was_left_out(tmp_path):
    """A cell printing 10 MB: its executed copy keeps the first 1 MB and a note; the checks
    are graded as ever."""
    from course_utils.authoring import code, read, write
    from course_utils.grading.submission import CELL_OUTPUT_CAP

    solutions, scenarios = make_course(tmp_path)
    loud = read(scenarios / f"solved_{TOY}")
    loud.cells.insert(3, code("print('x' * 10_000_000)"))
    write(loud, tmp_path / f"loud_{TOY}")
    out = tmp_path / "out"
    summary = grade([tmp_path / f"loud_{TOY}"], out=out, solutions=solutions)
    assert summary.counts == {"passed": 2}
    executed = out / "executed" / f"loud_{TOY}"
    assert executed.stat().st_size < 2 * CELL_OUTPUT_CAP
    text = executed.read_text()
    assert "outputs came to 10.0 MB; the stored copy keeps the first 1.0 MB" in text


def test_a_check_after_an_exercise_cell_that_timed_out_names_that_cell(tmp_path):
    """The exercise cell hangs before it defines double(): the check's row says the cell above
    ran past the limit, not only that `double` is not defined."""
    from course_utils.authoring import read, write

    solutions, scenarios = make_course(tmp_path)
    nb = read(scenarios / f"solved_{TOY}")
    cell = next(c for c in nb.cells if c.source.startswith("def double"))
    cell.source = "while True:\n    pass\n\n" + cell.source
    write(nb, tmp_path / f"stuck_{TOY}")
    grade([tmp_path / f"stuck_{TOY}"], out=tmp_path / "out", solutions=solutions, cell_timeout=5)
    with open(tmp_path / "out" / "grades.csv", newline="", encoding="utf-8") as f:
        row = next(r for r in csv.DictReader(f) if r["check"] == "toy-double")
    assert row["status"] == "error" and "NameError" in row["message"]
    assert "the cell above that defines 'double'" in row["message"]
    assert "ran past the 5 s cell limit and was interrupted" in row["message"]
