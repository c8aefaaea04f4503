"""The judge (course_utils.grading.judge) and the kernel's side of a judged check
(course_utils.judged): a verdict is decided outside the kernel, only in the check's own locked
cell, once, from probe data; what the kernel sends can change what is shown, not what counts.

Here the kernel's side runs in this process (a thread), the toy lesson's checks on plain
functions; tests/judge_helpers.py and the grading tests run it in another process."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest

from course_utils import judged, wire
from course_utils.grading.judge import Judge
from course_utils.lessons import toy
from course_utils.protocol import ERROR, FAILED, NOT_ATTEMPTED, PASSED


class Run:
    """A judge listening in tmp_path, with the cell that runs now set by the test."""

    def __init__(self, tmp_path: Path, cell=(0, "toy-double")):
        self.cell, self.verdicts, self.lost = cell, {}, {}
        self.path = tmp_path / "judge.sock"
        self.judge = Judge(self.path, lambda: self.cell, self.report).start()

    def report(self, check_id, verdict, detail):
        if verdict is None:
            self.lost[check_id] = detail
        else:
            self.verdicts[check_id] = verdict

    def kernel_checks(self, monkeypatch, check, *answers):
        """The check cell as the grading kernel runs it: the check asks the judge."""
        monkeypatch.setenv(judged.JUDGE_ENV, str(self.path))
        monkeypatch.setenv("COURSE_GRADING", "1")
        return check(*answers)


@pytest.fixture
def run(tmp_path):
    r = Run(tmp_path)
    yield r
    r.judge.close()


def test_the_judge_decides_and_the_cell_shows_its_verdict(run, monkeypatch):
    shown = run.kernel_checks(monkeypatch, toy.check_double, lambda x: x + x)
    assert run.verdicts["toy-double"]["status"] == PASSED == shown.status
    assert shown.points == 1


def test_wrong_and_unwritten_answers_are_decided_the_same_way(run, monkeypatch):
    run.kernel_checks(monkeypatch, toy.check_double, lambda x: x * 3)
    assert run.verdicts["toy-double"]["status"] == FAILED
    run.judge.judged_cells.clear()

    def stub(x):
        raise NotImplementedError()

    run.kernel_checks(monkeypatch, toy.check_double, stub)
    assert run.verdicts["toy-double"]["status"] == NOT_ATTEMPTED


def test_the_learners_exception_is_reported_by_type_and_line(run, monkeypatch):
    def crash(x):
        return {}["missing"]

    run.kernel_checks(monkeypatch, toy.check_double, crash)
    message = run.verdicts["toy-double"]["message"]
    assert run.verdicts["toy-double"]["status"] == ERROR
    assert "KeyError" in message and "in your code" in message


def test_raising_reference_withheld_is_an_error_not_a_pass_on_applicability(run, monkeypatch):
    from course_utils.errors import ReferenceWithheld

    def dodge(x):
        raise ReferenceWithheld("reference_double")

    run.kernel_checks(monkeypatch, toy.check_double, dodge)
    assert run.verdicts["toy-double"]["status"] == ERROR
    assert "ReferenceWithheld" in run.verdicts["toy-double"]["message"]


def test_a_check_asked_from_another_cell_is_refused(run, monkeypatch):
    run.cell = (3, None)  # an exercise cell runs, not the locked check cell
    shown = run.kernel_checks(monkeypatch, toy.check_double, lambda x: x + x)
    assert shown.status == ERROR and "only in its locked cell" in shown.message
    assert run.verdicts == {}


def test_a_check_is_decided_once_per_run_of_its_cell(run, monkeypatch):
    run.kernel_checks(monkeypatch, toy.check_double, lambda x: x * 3)
    again = run.kernel_checks(monkeypatch, toy.check_double, lambda x: x + x)
    assert again.status == ERROR and "already decided" in again.message
    assert run.verdicts["toy-double"]["status"] == FAILED


def test_a_check_claimed_for_another_id_is_refused(run, monkeypatch):
    run.cell = (4, "toy-double")
    shown = run.kernel_checks(monkeypatch, toy.check_square, lambda x: x * x)
    assert shown.status == ERROR and run.verdicts == {}


def _kernel_side(path: Path, check_id: str, answer_values: list, script):
    """A hand-made kernel: opens a session, then answers each probe with script(control)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(str(path))
    wire.send(
        sock,
        {"open": check_id, "answers": [{"callable": True, "name": "double"}], "kwargs": []},
        [],
        with_value=True,
    )
    while True:
        control, _ = wire.receive(sock)
        if "verdict" in control or "refused" in control:
            sock.close()
            return control
        reply = script(control)
        if reply is None:
            sock.close()
            return None
        wire.send(sock, {"result": True}, reply, with_value=True)


def test_forged_probe_data_is_compared_like_any_other(run):
    """A kernel that answers the probe with what a pass 'looks like' must still send the
    value the judge computes: a string, a dict or a list earn nothing; 6 is double(3)."""
    for forged in ("6", {"status": "passed"}, [6]):
        run.judge.judged_cells.clear()
        _kernel_side(run.path, "toy-double", [], lambda c, f=forged: f)
        assert run.verdicts["toy-double"]["status"] == FAILED, forged
    run.judge.judged_cells.clear()
    _kernel_side(run.path, "toy-double", [], lambda c: 6)  # the right value is a pass
    assert run.verdicts["toy-double"]["status"] == PASSED


def test_a_kernel_that_hangs_up_mid_check_gets_no_verdict(run):
    _kernel_side(run.path, "toy-double", [], lambda control: None)
    for _ in range(50):
        if "toy-double" in run.lost:
            break
        threading.Event().wait(0.05)
    assert "toy-double" in run.lost and "toy-double" not in run.verdicts


def test_garbage_on_the_socket_does_not_stop_the_judge(run, monkeypatch):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(str(run.path))
    sock.sendall(b"\x00" * 16 + b"not a message")
    sock.close()
    shown = run.kernel_checks(monkeypatch, toy.check_double, lambda x: x + x)
    assert shown.status == PASSED
