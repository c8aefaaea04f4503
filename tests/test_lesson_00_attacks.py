"""Lesson 00's checks against the grading red team's attacks (issue 32, tests/redteam/
grading_v3_attacks.py), each written here in a few lines, in-process: a timer that returns a
constant, one that reads the step's duration from its closure and writes the probe's call
counter, one that reads the probe's frame, and answers replayed from earlier feedback. Under
`judge_draws()` (fresh specimens, as `course grade` draws them) and through
`judge_helpers.remote_verdict` (the learner's side in another process) each fails, and the
reference passes under a few draws."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from check_helpers import failure
from judge_helpers import remote_verdict

from course_utils import probes
from course_utils.lessons import measuring as lesson
from course_utils.lessons.measuring.checks import activation_sizes
from course_utils.lessons.measuring.demo import HIDDEN_OP_SIZES
from course_utils.lessons.measuring.slowest_op import ASKS, draw_sizes
from course_utils.measure import time_fn
from course_utils.probes import judge_draws

TESTS = Path(__file__).resolve().parent
REFERENCE = "course_utils.lessons.measuring.reference"

# --- the attacks -------------------------------------------------------------------------------


def _cells(fn) -> dict:
    """A function's closure as {name: value}."""
    code = getattr(fn, "__code__", None)
    if code is None or not fn.__closure__:
        return {}
    return {n: c.cell_contents for n, c in zip(code.co_freevars, fn.__closure__, strict=True)}


def _probe_locals(*names) -> dict:
    """The locals of the nearest caller frame (the probe's) that holds one of `names`."""
    frame = sys._getframe(2)
    while frame is not None:
        if any(n in frame.f_locals for n in names):
            return frame.f_locals
        frame = frame.f_back
    return {}


def constant_timer(step, synchronize, warmup=3, repeats=10):
    """a05: makes every call (and waits for them), times nothing, returns 30 ms."""
    for _ in range(warmup + repeats):
        step()
    synchronize()
    return 0.0302


def closure_timer(step, synchronize, warmup=3, repeats=10):
    """a06: reads the queued seconds from the step's closure, adds warmup + repeats to the
    probe's call counter, and never calls the step."""
    cells = _cells(step)
    secret = _cells(cells.get("inner"))
    if "step_s" in secret:
        cells["calls"][0] += warmup + repeats
        return float(secret["step_s"])
    if "seconds" in secret:
        cells["calls"][0] += warmup + repeats
        return float(secret["per_call"].get(warmup + 1, secret["seconds"]))
    return time_fn(step).median


def frame_timer(step, synchronize, warmup=3, repeats=10):
    """a07 / b11: reads the probe's `recipe` and `calls` from its frame and answers from them."""
    seen = _probe_locals("recipe")
    recipe, calls = seen.get("recipe", {}), seen.get("calls")
    if recipe.get("kind") in ("async", "sync"):
        calls[0] = warmup + repeats
        return float(recipe["args"][0] if recipe["kind"] == "async" else recipe["seconds"])
    return time_fn(step).median


# bytes per (case, batch) and the top operator per scenario, as earlier feedback printed them
SAVED = {
    ("mlp", 6): 20260,
    ("mlp", 8): 27012,
    ("mlp", 10): 33764,
    ("attention", 6): 39936,
    ("attention", 8): 53248,
    ("attention", 10): 66560,
}
SCENARIOS = {
    "600 cheap calls in a loop": "aten::cumsum",
    "resizing inside the step": "aten::upsample_bicubic2d",
    "full sorts in the loss": "aten::sort",
    "hard examples by argsort": "aten::sort",
}


def _case_of(forward) -> tuple[str | None, int | None]:
    cells = _cells(forward)
    if "x_mlp" in cells:
        return "mlp", int(cells["x_mlp"].shape[0])
    if "x_att" in cells:
        return "attention", 2 * int(cells["x_att"].shape[0])
    return None, None


def replayed_bytes(forward):
    """a05: the bytes feedback printed for this case and batch, read off the closure."""
    return SAVED.get(_case_of(forward), 0)


def frame_bytes(forward):
    """a07: the case and batch read from the probe's frame, the bytes from feedback."""
    seen = _probe_locals("case", "batch")
    case = "mlp" if "MLP" in str(seen.get("case")) else "attention"
    return SAVED.get((case, seen.get("batch")), 0)


def frame_slowest_op(step):
    """a07: the scenario's name read from the probe's frame, its operator from feedback."""
    return SCENARIOS.get(_probe_locals("scenario", "threads").get("scenario"), "aten::cumsum")


def replayed_slowest_op(step):
    """a05: the operator feedback named for the hidden step, picked by the step's name."""
    names = {
        "many_small_calls": "aten::cumsum",
        "resize_in_the_step": "aten::upsample_bicubic2d",
        "sorted_regulariser": "aten::sort",
        "hardest_by_argsort": "aten::sort",
    }
    name = getattr(step, "__name__", "")
    if name == "first_call_slow":
        name = getattr(_cells(step).get("step"), "__name__", name)
    return names.get(name, "aten::mm")


# --- in-process, under the judge's draws ---------------------------------------------------------


@pytest.fixture
def seeded(monkeypatch):
    """judge_draws() with a seed the test names, so that a draw the test relies on is known."""

    def use(seed: int) -> None:
        monkeypatch.setattr(probes.secrets, "randbits", lambda bits: seed)

    return use


def _second_wins(scenario: str, sizes: list[int]) -> bool:
    """Whether `sizes` are of the draw whose top operator is the step's second candidate."""
    bounds = {  # the second candidate's smallest size when it wins (draw_sizes)
        "600 cheap calls in a loop": 450,
        "resizing inside the step": 640,
        "full sorts in the loss": 45_000,
        "hard examples by argsort": 5_000,
    }
    return sizes[1] >= bounds[scenario]


def _drawn_variants(seed: int) -> list[bool]:
    """For each draw of 00-slowest-op under `seed` (the loop's four asks, then the other three
    steps), whether its top operator is the second candidate (draw_sizes)."""
    firsts = {scenario: list(sizes) for scenario, sizes in HIDDEN_OP_SIZES.items()}
    seen = []
    with judge_draws():
        assert probes._SPECIMEN_SEED.get() == seed
        rng = probes.specimen_rng()
        for scenario in HIDDEN_OP_SIZES:
            for _ in range(ASKS.get(scenario, 1)):
                sizes = draw_sizes(scenario, rng)
                seen.append(sizes != firsts[scenario] and _second_wins(scenario, sizes))
    return seen


@pytest.mark.parametrize("timer", [constant_timer, closure_timer, frame_timer])
def test_step_timer_fails_the_attacks_under_fresh_draws(timer):
    """A constant 30 ms fits the first step at best, never the second, 2.5-3x as long; a timer
    that reads the step's duration and writes the call counter, never calling step(), took
    far less than the work of warmup + repeats calls by the check's own clock."""
    with judge_draws():
        exc = failure(lesson.check_step_timer, timer)
    assert exc.status == "failed", exc.summary
    if timer is constant_timer:  # wrong on the first step, or else on the second
        assert "your timer says 30.2 ms" in exc.summary
    else:
        assert "fewer calls of step() ran than that" in exc.summary


def test_step_timer_passes_the_reference_under_fresh_draws():
    for _ in range(3):
        with judge_draws():
            assert lesson.check_step_timer(lesson.reference_time_step).status == "passed"


@pytest.mark.parametrize("counter", [replayed_bytes, frame_bytes])
def test_activation_bytes_fails_replayed_feedback_under_fresh_draws(counter, seeded):
    """Bytes copied from earlier feedback, looked up by the batch read off the closure or the
    probe's frame: the widths and depth are drawn too (seed 7: not the notebook's)."""
    seeded(7)
    with judge_draws():
        sizes = activation_sizes()
        assert (sizes["hidden"], sizes["depth"], sizes["width"], sizes["seq"]) != (256, 3, 128, 16)
        exc = failure(lesson.check_activation_bytes, counter)
    assert exc.status == "failed", exc.summary


def test_activation_bytes_passes_the_reference_under_fresh_draws():
    for _ in range(3):
        with judge_draws():
            assert lesson.check_activation_bytes(lesson.reference_saved_bytes).status == "passed"


@pytest.mark.parametrize("answer", [frame_slowest_op, replayed_slowest_op])
def test_slowest_op_fails_replayed_feedback_under_fresh_draws(answer, seeded):
    """The operator feedback named for each step, picked by its name or read off the probe's
    frame: where the draw makes the other candidate the top one, it is wrong. Each of the 7
    draws is the second candidate half the time, so a fixed table passes 1 run in 128; seed 3
    draws the second somewhere (asserted), as nearly every run does."""
    seeded(3)
    assert any(_drawn_variants(3))
    with judge_draws():
        exc = failure(lesson.check_slowest_op, answer)
    assert exc.status == "failed", exc.summary


@pytest.mark.parametrize("seed", [1, 11])
def test_slowest_op_passes_the_reference_under_fresh_draws(seed, seeded):
    seeded(seed)
    with judge_draws():
        assert lesson.check_slowest_op(lesson.reference_slowest_op).status == "passed"


# --- judged as `course grade` judges: the attacks in another process ----------------------------


@pytest.mark.parametrize(
    "check_id, attack, cause",
    [
        ("00-step-timer", "constant_timer", "your timer says 30.2 ms"),
        ("00-step-timer", "closure_timer", "fewer calls of step() ran"),
        ("00-step-timer", "frame_timer", "fewer calls of step() ran"),
        ("00-activation-bytes", "frame_bytes", "the saved storages hold"),
    ],
)
def test_judged_remotely_the_attacks_fail(monkeypatch, check_id, attack, cause):
    """The check body here (the judge, which draws afresh), every call to the answer in a child
    (the kernel) through probes, as under `course grade`: the attack fails."""
    monkeypatch.setenv("PYTHONPATH", str(TESTS))
    judged = remote_verdict(check_id, f"test_lesson_00_attacks:{attack}")
    assert judged["status"] == "failed" and cause in judged["message"], judged["message"]


def test_judged_remotely_a_frame_reader_fails_the_slowest_op(monkeypatch, seeded):
    monkeypatch.setenv("PYTHONPATH", str(TESTS))
    seeded(3)
    judged = remote_verdict("00-slowest-op", "test_lesson_00_attacks:frame_slowest_op")
    assert judged["status"] == "failed", judged["message"]


@pytest.mark.parametrize(
    "check_id, reference",
    [
        ("00-step-timer", "reference_time_step"),
        ("00-activation-bytes", "reference_saved_bytes"),
    ],
)
def test_judged_remotely_the_reference_passes_fresh_draws(check_id, reference):
    judged = remote_verdict(check_id, f"{REFERENCE}:{reference}")
    assert judged["status"] == "passed", judged["message"]
