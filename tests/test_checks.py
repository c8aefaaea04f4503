"""course_utils.checks: a check turns the learner's outcome into one status, shows it, emits
the structured result that `course grade` reads, and raises CheckFailed unless it passed."""

from __future__ import annotations

import builtins
import json
import sys

import pytest

import course_utils.checks as checks
from course_utils.checks import (
    ERROR,
    FAILED,
    MIME,
    NOT_APPLICABLE,
    NOT_ATTEMPTED,
    PASSED,
    CheckResult,
    Threshold,
    at_least,
    at_most,
    check,
    correct,
    not_applicable,
    retry_measure,
)
from course_utils.device import device_class
from course_utils.errors import CheckFailed
from course_utils.probes import call_with, observe, probe

CONTRACT_FIELDS = {
    "check_id",
    "status",
    "points",
    "max_points",
    "value",
    "threshold",
    "device_class",
    "message",
}


@check("demo-double", points=2, hint="Return x + x.")
def check_double(double):
    got = observe(call_with, double, 3)
    return [
        correct(
            "double(3)", got == 6, f"double(3) returned {got!r}, expected 6", value=got, threshold=6
        )
    ]


def learner_double(x):
    return x + x


def learner_wrong(x):
    return x * 3


def learner_not_attempted(x):
    # YOUR CODE HERE
    raise NotImplementedError()


def learner_crashes(x):
    return {}["missing key"]


# --- statuses ---------------------------------------------------------------------------------


def test_a_correct_function_passes_with_full_points():
    result = check_double(learner_double)
    assert isinstance(result, CheckResult)
    assert result.status == PASSED
    assert result.points == result.max_points == 2
    assert result.check_id == "demo-double"
    assert result.value == 6 and result.threshold == 6
    assert result.device_class == device_class()


def test_a_wrong_function_raises_check_failed_with_a_message():
    with pytest.raises(CheckFailed) as info:
        check_double(learner_wrong)
    assert info.value.status == FAILED
    assert info.value.check_id == "demo-double"
    assert "returned 9, expected 6" in info.value.summary


def test_check_failed_is_an_assertion_error_so_nbval_marks_the_cell():
    with pytest.raises(AssertionError):
        check_double(learner_wrong)


def test_a_body_raising_not_implemented_error_is_not_attempted():
    with pytest.raises(CheckFailed) as info:
        check_double(learner_not_attempted)
    assert info.value.status == NOT_ATTEMPTED
    assert "NotImplementedError" in info.value.summary


def test_another_exception_is_an_error_named_in_one_line():
    with pytest.raises(CheckFailed) as info:
        check_double(learner_crashes)
    assert info.value.status == ERROR
    message = info.value.summary
    assert "KeyError" in message
    assert "\n" not in message
    assert "in your code" in message  # points at the learner's line, not the harness's


def test_an_exception_with_a_multi_line_message_is_cut_to_its_first_line():
    message = "\n".join(["first line", "second line", "third line"])

    def crash(x):
        raise ValueError(message)

    with pytest.raises(CheckFailed) as info:
        check_double(crash)
    assert "ValueError: first line" in info.value.summary
    assert "second line" not in info.value.summary


def test_points_are_zero_unless_passed(monkeypatch):
    results = []
    monkeypatch.setattr(checks, "emit", results.append)
    for learner in (learner_wrong, learner_not_attempted, learner_crashes):
        with pytest.raises(CheckFailed):
            check_double(learner)
    assert [r.status for r in results] == [FAILED, NOT_ATTEMPTED, ERROR]
    assert all(r.points == 0 and r.max_points == 2 for r in results)


# --- parts ----------------------------------------------------------------------------------------


@check("demo-speed", points=3)
def check_speed(ok: bool, speedup: float, applies: bool):
    return [
        correct("same output", ok, "outputs match" if ok else "outputs differ"),
        at_least("speed", speedup, 1.5, "speedup", applies=applies, reason="no tensor cores here"),
    ]


def test_a_speed_part_that_does_not_apply_is_not_applicable_and_correctness_still_passes():
    result = check_speed(True, 1.0, applies=False)
    assert result.status == PASSED
    assert result.points == 3
    speed = result.parts[1]
    assert speed.status == NOT_APPLICABLE
    assert "no tensor cores here" in speed.message
    assert speed.value == 1.0  # the measured value is still reported


def test_a_speed_part_that_does_not_apply_does_not_rescue_a_wrong_result():
    with pytest.raises(CheckFailed) as info:
        check_speed(False, 1.0, applies=False)
    assert info.value.status == FAILED


def test_a_speed_part_below_its_threshold_fails_where_it_applies():
    with pytest.raises(CheckFailed) as info:
        check_speed(True, 1.2, applies=True)
    assert info.value.status == FAILED
    assert "below the 1.5x expected" in info.value.summary


def test_the_graded_value_is_the_first_applicable_measured_part():
    result = check_speed(True, 2.0, applies=True)
    assert (result.value, result.threshold) == (2.0, 1.5)


def test_a_check_whose_only_part_does_not_apply_is_not_applicable_and_does_not_raise():
    @check("demo-na", points=1)
    def only_speed():
        return [not_applicable("speed", "needs a CUDA GPU")]

    result = only_speed()
    assert result.status == NOT_APPLICABLE
    assert result.points == 0


@pytest.mark.parametrize(
    ("value", "status"),
    [(0.5, PASSED), (1.0, PASSED), (1.5, FAILED)],
)
def test_at_most_passes_up_to_its_threshold(value, status):
    assert at_most("memory", value, 1.0, "peak memory", unit=" GB").status == status


def test_on_gradescope_a_speed_part_is_reported_not_graded(monkeypatch):
    monkeypatch.setenv("COURSE_PLATFORM", "gradescope")
    slow = at_least("speed", 1.1, 1.5, "speedup")
    assert slow.status == NOT_APPLICABLE and slow.value == 1.1
    assert "measured 1.1x" in slow.message and "half of a shared virtual CPU" in slow.message
    result = check_speed(True, 1.1, applies=True)  # a slow one no longer fails the check
    assert result.status == PASSED


def test_on_gradescope_a_timed_limit_is_reported_and_an_untimed_one_still_graded(monkeypatch):
    monkeypatch.setenv("COURSE_PLATFORM", "Gradescope")
    assert at_most("step time", 9.0, 3.0, "ratio", timed=True).status == NOT_APPLICABLE
    assert at_most("memory", 9.0, 3.0, "peak").status == FAILED


def test_an_unknown_platform_grades_timing_as_usual(monkeypatch):
    monkeypatch.setenv("COURSE_PLATFORM", "my-laptop")
    assert at_least("speed", 1.1, 1.5, "speedup").status == FAILED
    assert at_most("step time", 9.0, 3.0, "ratio", timed=True).status == FAILED


# --- what the learner and `course grade` see ----------------------------------------------------


def test_emit_outside_ipython_prints_the_verdict(capsys):
    check_double(learner_double)
    out = capsys.readouterr().out
    assert "Check demo-double: passed" in out
    assert "2/2 points" in out


def test_emit_under_ipython_displays_the_contract_fields_as_course_check_json(monkeypatch):
    IPython = pytest.importorskip("IPython")  # with the [tools] extra (ipykernel)
    display = pytest.importorskip("IPython.display")

    shown = []
    monkeypatch.setattr(IPython, "get_ipython", lambda: object())
    monkeypatch.setattr(display, "display", lambda obj, raw=False: shown.append((obj, raw)))
    with pytest.raises(CheckFailed):
        check_double(learner_wrong)
    [(bundle, raw)] = shown
    assert raw is True
    assert MIME == "application/vnd.course-check+json"
    assert {MIME, "text/plain", "text/html"} <= set(bundle)
    payload = json.loads(json.dumps(bundle[MIME]))  # survives a JSON round trip
    assert CONTRACT_FIELDS <= set(payload)
    assert payload["check_id"] == "demo-double"
    assert payload["status"] == FAILED
    assert payload["points"] == 0 and payload["max_points"] == 2
    assert payload["value"] == 9 and payload["threshold"] == 6
    assert payload["device_class"] == device_class()
    assert "expected 6" in payload["message"]


@pytest.fixture
def ipython_shell(monkeypatch, tmp_path):
    """A real IPython shell, without history on disk; what it changes is put back after."""
    pytest.importorskip("IPython")  # with the [tools] extra (ipykernel)
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    monkeypatch.setenv("IPYTHONDIR", str(tmp_path))
    main, names = sys.modules["__main__"], set(vars(builtins))
    config = Config()
    config.HistoryManager.enabled = False
    shell = InteractiveShell.instance(config=config)
    yield shell
    InteractiveShell.clear_instance()
    sys.modules["__main__"] = main
    for name in set(vars(builtins)) - names:
        delattr(builtins, name)


def test_a_check_cell_run_by_ipython_emits_json_and_a_one_line_verdict(ipython_shell):
    from IPython.utils.capture import capture_output

    ipython_shell.user_ns.update(
        check_double=check_double, learner_double=learner_double, learner_wrong=learner_wrong
    )
    with capture_output() as passed:
        ok = ipython_shell.run_cell("check_double(learner_double);")
    with capture_output() as failed:
        bad = ipython_shell.run_cell("check_double(learner_wrong)")
    assert ok.success and not bad.success
    assert isinstance(bad.error_in_exec, CheckFailed)
    [shown] = [o.data for o in passed.outputs if MIME in o.data]
    assert shown[MIME]["status"] == PASSED
    [shown] = [o.data for o in failed.outputs if MIME in o.data]
    assert shown[MIME]["status"] == FAILED
    # IPython shows _render_traceback_, not the harness's frames
    assert failed.stdout.strip().splitlines() == [
        "Check demo-double failed: " + bad.error_in_exec.summary
    ]


def test_check_failed_renders_as_a_one_line_traceback():
    exc = CheckFailed("demo-double", FAILED, "double(3) returned 9, expected 6")
    rendered = exc._render_traceback_()
    assert rendered == ["Check demo-double failed: double(3) returned 9, expected 6"]
    assert "\n" not in rendered[0]
    assert str(exc) == "[demo-double] failed: double(3) returned 9, expected 6"


def test_check_result_to_dict_is_json_ready():
    result = check_speed(True, 2.0, applies=True)
    d = json.loads(json.dumps(result.to_dict()))
    assert CONTRACT_FIELDS <= set(d)
    assert [p["status"] for p in d["parts"]] == [PASSED, PASSED]


def test_the_hint_is_shown_only_when_the_check_did_not_pass(monkeypatch):
    results = []
    monkeypatch.setattr(checks, "emit", results.append)
    check_double(learner_double)
    with pytest.raises(CheckFailed):
        check_double(learner_wrong)
    assert "Hint" not in results[0].text() and "Hint" not in results[0].html()
    assert "Hint: Return x + x." in results[1].text()


# --- retry_measure ------------------------------------------------------------------------------


def test_retry_measure_stops_at_the_first_passing_value():
    values = iter([1.0, 2.0, 3.0, 4.0])
    calls = []

    def measure():
        calls.append(1)
        return next(values)

    assert retry_measure(measure, lambda v: v >= 2.0, attempts=4) == 2.0
    assert len(calls) == 2


def test_retry_measure_does_not_retry_a_first_pass():
    calls = []
    assert retry_measure(lambda: calls.append(1) or 5.0, lambda v: v > 1, attempts=3) == 5.0
    assert len(calls) == 1


def test_retry_measure_gives_up_after_attempts_and_returns_the_last_value():
    values = iter([1.0, 1.1, 1.2, 9.0])
    calls = []

    def measure():
        calls.append(1)
        return next(values)

    assert retry_measure(measure, lambda v: v >= 2.0, attempts=3) == 1.2
    assert len(calls) == 3


def test_learner_code_calling_a_reference_answer_fails_saying_so():
    @checks.reference
    def reference_double(x):
        return x + x

    @check("test-delegation", points=1)
    def check_double(double):
        got = observe(call_with, double, 3)
        return [correct("double(3)", got == 6, "double(3) must be 6")]

    def delegating(x):
        return reference_double(x)

    with pytest.raises(CheckFailed) as info:
        check_double(delegating)
    assert info.value.status == FAILED
    assert "reference answer `reference_double`" in info.value.summary
    assert check_double(lambda x: x * 2).status == PASSED
    assert reference_double(3) == 6  # outside a check, demos may use it


def test_a_check_may_use_the_reference_itself_while_grading():
    @checks.reference
    def reference_square(x):
        return x * x

    @check("test-reference-inside", points=1)
    def check_square(square):
        got = observe(call_with, square, 4)
        return [correct("square(4)", got == reference_square(4), "square(4) must be 16")]

    assert check_square(lambda x: x**2).status == PASSED


@probe
def built_x(cls, x):
    """A class answer, built beside the learner's code: only its attribute comes back."""
    return cls(x).x


# --- a check body sees plain data, never the learner's objects -------------------------------


def test_a_value_whose_eq_would_lie_arrives_as_a_plain_number():
    class Agreeable(int):
        def __eq__(self, other):
            return True

        __hash__ = int.__hash__

    seen = []

    @check("test-plain-data", points=1)
    def check_value(fn):
        got = observe(call_with, fn, 0)
        seen.append(type(got))
        return [correct("value", got == 6, f"got {got!r}")]

    with pytest.raises(CheckFailed):
        check_value(lambda _: Agreeable(9))
    assert seen == [int]


def test_a_check_body_that_calls_the_answer_itself_errors_at_once():
    @check("test-direct-call", points=1)
    def check_direct(fn):
        return [correct("direct", fn(3) == 6, "")]

    with pytest.raises(CheckFailed) as info:
        check_direct(learner_double)
    assert info.value.status == ERROR
    assert "through a probe" in info.value.summary


# --- demos use an answer once its check passed it ------------------------------------------


def _quietly(run, *answers):
    """Run a check, ignoring the CheckFailed it raises for a non-pass."""
    try:
        run(*answers)
    except CheckFailed:
        pass


def test_a_demo_uses_an_answer_only_after_its_check_passed_it(capsys):
    def reference(x):
        return x + x

    def double(x):
        return x + x

    assert checks.learner_or_reference(double, reference, "double") is reference
    assert "has not been through its check yet" in capsys.readouterr().out
    check_double(double)
    assert checks.learner_or_reference(double, reference, "double") is double


def test_a_stub_that_never_raises_on_a_probe_still_counts_as_unsolved(capsys):
    """02's LARS stub skips tensors without a gradient, so a probe on one never raised."""

    def stub(x):
        if x == 0:  # the probe's input: no NotImplementedError reached
            return 0
        raise NotImplementedError()

    _quietly(check_double, stub)
    assert checks.learner_or_reference(stub, learner_double, "stub") is learner_double
    assert "is not written yet" in capsys.readouterr().out


def test_a_failed_or_redefined_answer_falls_back_and_says_why(capsys):
    _quietly(check_double, learner_wrong)
    assert checks.learner_or_reference(learner_wrong, learner_double, "wrong") is learner_double
    assert "has not passed its check yet (failed)" in capsys.readouterr().out

    def rewritten(x):  # the learner edits the cell after its check passed
        return x + x

    check_double(learner_double)
    assert checks.learner_or_reference(rewritten, learner_double, "double") is learner_double


def test_a_class_answer_is_returned_itself_not_wrapped():
    class Answer:
        def __init__(self, x):
            self.x = x

    @check("test-class-answer", points=1)
    def check_class(cls):
        return [correct("built", observe(built_x, cls, 2) == 2, "cls(2).x")]

    check_class(Answer)
    assert checks.learner_or_reference(Answer, object, "Answer") is Answer


# --- Run All goes on past an unwritten exercise; test runners still count it ----------------


def test_not_attempted_does_not_stop_run_all_in_jupyter(monkeypatch):
    monkeypatch.delenv("PYTEST_VERSION", raising=False)
    monkeypatch.delenv("COURSE_STRICT_CHECKS", raising=False)
    shown = []
    monkeypatch.setattr(checks, "emit", shown.append)
    result = check_double(learner_not_attempted)  # no CheckFailed
    assert result.status == NOT_ATTEMPTED and shown == [result]
    for wrong in (learner_wrong, learner_crashes):  # failures still stop it
        with pytest.raises(CheckFailed):
            check_double(wrong)


@pytest.mark.parametrize("variable", ["PYTEST_VERSION", "COURSE_STRICT_CHECKS"])
def test_not_attempted_fails_the_cell_under_a_test_runner(monkeypatch, variable):
    monkeypatch.delenv("PYTEST_VERSION", raising=False)
    monkeypatch.setenv(variable, "1")
    with pytest.raises(CheckFailed) as info:
        check_double(learner_not_attempted)
    assert info.value.status == NOT_ATTEMPTED


def test_every_check_is_registered_by_its_id_and_an_id_is_taken_once():
    @check("test-registry", points=1)
    def check_one(fn):
        return []

    assert checks.REGISTRY["test-registry"] is check_one
    with pytest.raises(ValueError, match="registered twice"):

        @check("test-registry", points=1)
        def check_other(fn):
            return []


# --- thresholds: where each value was measured -------------------------------------------


def all_thresholds() -> dict[str, Threshold]:
    """Every lesson's THRESHOLDS and the diagnosis's, by "module: name"."""
    import importlib
    import pkgutil

    import course_utils.lessons as lessons

    modules = [
        f"course_utils.lessons.{m.name}.checks" for m in pkgutil.iter_modules(lessons.__path__)
    ]
    found = {}
    for name in [*modules, "course_utils.diagnose.thresholds"]:
        for key, t in importlib.import_module(name).THRESHOLDS.items():
            found[f"{name}: {key}"] = t
    return found


def test_threshold_measured_on_defaults_to_nowhere_and_accepts_device_classes():
    assert Threshold(1.0, "a spec").measured_on == ()
    assert Threshold(1.0, "x", measured_on=("cpu-bf16", "cuda")).measured_on == ("cpu-bf16", "cuda")


@pytest.mark.parametrize("bad", [("h200",), ("cpu", "gpu")])
def test_threshold_measured_on_rejects_unknown_device_classes(bad):
    with pytest.raises(ValueError, match="unknown device classes"):
        Threshold(1.0, "x", measured_on=bad)


def test_threshold_measured_on_rejects_a_bare_string():
    with pytest.raises(TypeError, match="tuple"):
        Threshold(1.0, "x", measured_on="cpu-bf16")


def test_every_threshold_claiming_a_gpu_measurement_names_the_gpu_and_no_spec_claims_one():
    """measured_on is what `course selftest` trusts: a GPU class must come with the GPU in the
    evidence, and evidence that says it is no measurement must list no GPU class."""
    thresholds = all_thresholds()
    assert len(thresholds) > 50
    unmeasured = ("not a measurement", "measured nowhere", "never measured on a gpu")
    for name, t in thresholds.items():
        gpu = [c for c in t.measured_on if c.startswith("cuda")]
        if gpu:
            assert "H200" in t.evidence, name  # the only GPU the course has run on
        if any(words in t.evidence.lower() for words in unmeasured):
            assert not gpu, name


def test_show_limits_prints_values_by_name_and_never_the_evidence(capsys):
    thresholds = {
        "error": Threshold(0.05, "a right answer 0.004, the wrong one 0.5"),
        "speedup_cpu-bf16": Threshold(1.3, "measured 1.6-2.0x"),
    }
    checks.show_limits(thresholds, "error", "speedup_cpu-bf16")
    out = capsys.readouterr().out
    assert "error = 0.05" in out and "speedup_cpu-bf16 = 1.3" in out
    assert "0.004" not in out and "1.6-2.0x" not in out
