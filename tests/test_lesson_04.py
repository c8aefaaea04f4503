"""Lesson 04's checks pass the reference answers and valid alternatives, and fail the mistakes
learners make with loss scaling and the AMP step, naming the cause.

The correctness scenarios are small and run on the CPU. Tests of a wrong AMP step replace the
speed workload by a tiny one (the mistake is caught by the scenarios, not by timing); the
speed part is tested per device class with a faked measurement.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from check_helpers import fails, failure, not_attempted
from judge_helpers import remote_verdict
from torch import nn

from course_utils import authoring
from course_utils.lessons import mixed_precision as lesson
from course_utils.lessons.mixed_precision import checks, demo, scenarios
from course_utils.probes import Local


def _body(make_amp_step):
    """04-amp-step's body on a local answer (the check cell wraps the learner's function)."""
    return checks.check_amp_step.__wrapped__(Local(make_amp_step))


# --- exercise 1: loss scaling by hand --------------------------------------------------------


def scaled_grads(model, x, y, scale, unscale=True):
    model.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.float16):
        loss = F.mse_loss(model(x), y)
    (loss * scale).backward()
    return [p.grad / (scale if unscale else 1) for p in model.parameters()]


def static_2_14(model, x, y):
    """A strong learner's static choice: |grad| reaches ~2 early (2 * 2**14 < 65504) and
    ~1e-9 late (1e-9 * 2**14 > 2**-24)."""
    return scaled_grads(model, x, y, 2.0**14)


def dynamic_with_autograd_grad(model, x, y):
    """Dynamic scaling from 2**24 down, gradients by torch.autograd.grad instead of .grad."""
    params = list(model.parameters())
    scale = 2.0**24
    while True:
        with torch.autocast("cpu", dtype=torch.float16):
            loss = F.mse_loss(model(x), y)
        grads = torch.autograd.grad(loss * scale, params)
        if all(torch.isfinite(g).all() for g in grads):
            return [g.float() / scale for g in grads]
        scale /= 2


def test_loss_scale_check_passes_the_reference():
    assert lesson.check_loss_scale(lesson.reference_rescued_grads).status == "passed"


@pytest.mark.parametrize("answer", [static_2_14, dynamic_with_autograd_grad])
def test_loss_scale_check_passes_valid_alternatives(answer):
    assert lesson.check_loss_scale(answer).status == "passed"


@pytest.mark.parametrize(
    ("answer", "cause"),
    [
        (lambda m, x, y: scaled_grads(m, x, y, 1.0), "underflowed"),
        (lambda m, x, y: scaled_grads(m, x, y, 2.0**8), "late snapshot"),
        (lambda m, x, y: scaled_grads(m, x, y, 2.0**16), "overflowed"),
        (lambda m, x, y: scaled_grads(m, x, y, 2.0**14, unscale=False), "divide by the scale"),
        (lambda m, x, y: demo.fp32_grads(m, x, y), "did not run in float16"),
    ],
    ids=["no-scaling", "scale-too-small", "gradscaler-default-overflows", "not-unscaled", "fp32"],
)
def test_loss_scale_check_fails_mistakes_naming_the_cause(answer, cause):
    exc = failure(lesson.check_loss_scale, answer)
    assert exc.status == "failed"
    assert cause in exc.summary


def search_without_zeroing(model, x, y):
    """Lowers the scale after an overflow, but never clears .grad between tries: the failed
    try's inf stays, and every later backward adds onto it."""
    model.zero_grad(set_to_none=True)
    scale = 2.0**16
    while scale >= 1:
        with torch.autocast("cpu", dtype=torch.float16):
            loss = F.mse_loss(model(x), y)
        (loss * scale).backward()
        grads = [p.grad.float() / scale for p in model.parameters()]
        if all(torch.isfinite(g).all() for g in grads):
            break
        scale /= 2
    return grads


def unscaled_in_fp16(model, x, y):
    """A right scale, divided out in float16: the small gradients underflow again."""
    return [(g.half() / 2.0**14).float() for g in scaled_grads(model, x, y, 2.0**14, False)]


def returned_in_fp16(model, x, y):
    return [g.half() for g in static_2_14(model, x, y)]


def divided_twice(model, x, y):
    return [g / 2.0**14 for g in static_2_14(model, x, y)]


@pytest.mark.parametrize(
    ("answer", "cause", "not_cause"),
    [
        (search_without_zeroing, "added onto the inf/NaN the failed try left", "smaller scale"),
        (
            unscaled_in_fp16,
            "division by the scale (or a cast after it) ran in float16",
            "too small",
        ),
        (returned_in_fp16, "you returned float16 gradients", "too small"),
        (divided_twice, "divide the gradients by that scale, once", "larger scale"),
        (
            lambda m, x, y: scaled_grads(m, x, y, 1.0),
            "your backward ran unscaled",
            "float16 number",
        ),
        (
            lambda m, x, y: scaled_grads(m, x, y, 2.0**8),
            "loss scale of about 2^8",
            "float16 number",
        ),
    ],
    ids=[
        "search-keeps-inf",
        "unscaled-in-fp16",
        "returned-fp16",
        "divided-twice",
        "no-scale",
        "2^8",
    ],
)
def test_loss_scale_names_only_causes_its_probe_confirms(answer, cause, not_cause):
    """Issue 34: the cause is read from the probe's record of each backward pass (the loss
    scale it ran at, inf/NaN already in .grad) and from the gradients returned (dtype, float16
    numbers only); before, these four were told "a smaller scale", "the loss scale is too
    small" (twice) and "a larger scale"."""
    exc = failure(lesson.check_loss_scale, answer)
    assert cause in exc.summary and not_cause not in exc.summary, exc.summary


def test_loss_scale_check_reports_not_attempted_and_refuses_the_reference():
    assert fails(lesson.check_loss_scale, not_attempted) == "not-attempted"
    delegating = lambda m, x, y: lesson.reference_rescued_grads(m, x, y)  # noqa: E731
    assert "reference" in failure(lesson.check_loss_scale, delegating).summary


def test_late_snapshot_loses_most_gradients_in_fp16_without_scaling():
    model, x, y = demo.snapshot("late")
    assert demo.zero_fraction(demo.plain_fp16_grads(model, x, y)) > 0.5
    assert demo.zero_fraction(demo.fp32_grads(model, x, y)) == 0.0


# --- exercise 3: the AMP step ----------------------------------------------------------------


@pytest.fixture
def tiny_speed_workload(monkeypatch):
    """The speed part on a tiny MLP: these tests are about the scenarios' verdicts."""

    def tiny(device):
        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 10)).to(device)
        return model, torch.randn(16, 32, device=device), torch.randint(0, 10, (16,), device=device)

    monkeypatch.setattr(demo, "speed_workload", tiny)


def amp_step(order="right", scaler_for_bf16=False, fp16_scaler=True, backward_in_autocast=False,
             forward_in_autocast=True):  # fmt: skip
    """A make_amp_step factory with one mistake switched on."""

    def make(model, loss_fn, optimizer, device, dtype, max_norm):
        enabled = (dtype == torch.float16 and fp16_scaler) or scaler_for_bf16
        scaler = torch.amp.GradScaler(device.type, enabled=enabled)

        def clip():
            nn.utils.clip_grad_norm_(model.parameters(), max_norm)

        def step(x, y):
            with torch.autocast(device.type, dtype=dtype, enabled=forward_in_autocast):
                out = model(x)
            with torch.autocast(device.type, dtype=dtype):
                loss = loss_fn(out, y)
                if backward_in_autocast:
                    scaler.scale(loss).backward()
            if not backward_in_autocast:
                scaler.scale(loss).backward()
            if order == "right":
                scaler.unscale_(optimizer)
                clip()
            elif order == "clip-scaled":
                clip()
            scaler.step(optimizer)
            if order == "clip-after-step":
                clip()
            if order != "no-update":
                scaler.update()
            optimizer.zero_grad()
            return loss

        return step

    return make


def branching_step(model, loss_fn, optimizer, device, dtype, max_norm):
    """A valid alternative: a scaler only on the fp16 path, plain code for bf16, zero_grad first."""
    scaler = torch.amp.GradScaler(device.type) if dtype == torch.float16 else None

    def step(x, y):
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device.type, dtype=dtype):
            loss = loss_fn(model(x), y)
        if scaler is None:
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), max_norm, foreach=True)
            optimizer.step()
        else:
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            nn.utils.clip_grad_norm_(model.parameters(), max_norm, foreach=True)
            scaler.step(optimizer)
            scaler.update()
        return loss

    return step


def test_amp_step_check_passes_the_reference_with_its_speed_and_memory():
    result = lesson.check_amp_step(lesson.reference_make_amp_step)
    assert result.status == "passed"
    assert {p.name: p.status for p in result.parts}["activation memory"] == "passed"


@pytest.mark.usefixtures("tiny_speed_workload")
@pytest.mark.parametrize("answer", [amp_step(), branching_step])
def test_amp_step_scenarios_pass_valid_alternatives(answer):
    parts = _body(answer)
    assert all(p.status == "passed" for p in parts[:3]), [p.message for p in parts[:3]]


@pytest.mark.usefixtures("tiny_speed_workload")
def test_a_scaler_on_bf16_is_unneeded_but_passes_with_a_note():
    """bf16 gradients scaled by 2**16 and unscaled before the clip train exactly as float32:
    behaviour is graded, so the part passes, and says the scaler is not needed."""
    parts = {p.name: p for p in _body(amp_step(scaler_for_bf16=True))}
    assert parts["bf16"].status == "passed"
    assert "does not need" in parts["bf16"].message


def steps_with(mistake):
    """The right AMP step with one of the mistakes whose cause a probe must confirm."""

    def make(model, loss_fn, optimizer, device, dtype, max_norm):
        scaler = torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)

        def step(x, y):
            with torch.autocast(device.type, dtype=dtype):
                loss = loss_fn(model(x), y)
            scaler.scale(loss).backward()
            if mistake == "by-hand":  # divides itself, then scaler.step divides again
                for p in model.parameters():
                    p.grad.mul_(1.0 / scaler.get_scale())
            else:
                scaler.unscale_(optimizer)
            nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            if mistake == "update-first":
                scaler.update()
            if mistake == "optimizer-step":
                optimizer.step()
            else:
                scaler.step(optimizer)
            if mistake != "update-first":
                scaler.update()
            if mistake != "no-zero-grad":
                optimizer.zero_grad(set_to_none=True)
            return loss.detach()

        return step

    return make


@pytest.mark.usefixtures("tiny_speed_workload")
@pytest.mark.parametrize(
    ("mistake", "scenario", "cause"),
    [
        ("by-hand", "fp16, large gradients", "already divided by the scale"),
        ("update-first", "fp16, large gradients", "update() ran before scaler.step"),
        ("optimizer-step", "fp16, large gradients", "not through scaler.step(optimizer)"),
        ("no-zero-grad", "fp16, large gradients", "still held the previous step's gradients"),
    ],
)
def test_amp_step_names_a_cause_only_where_a_probe_confirmed_it(mistake, scenario, cause):
    parts = {p.name: p for p in _body(steps_with(mistake))}
    assert parts[scenario].status == "failed"
    assert cause in parts[scenario].message, parts[scenario].message
    if mistake in ("by-hand", "update-first", "optimizer-step"):  # they do not clip early
        assert "clipped them while" not in parts[scenario].message


def scaler_per_step(model, loss_fn, optimizer, device, dtype, max_norm):
    """A fresh GradScaler in every step: its scale never backs off from 2**16."""

    def step(x, y):
        scaler = torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)
        with torch.autocast(device.type, dtype=dtype):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad()
        return loss

    return step


@pytest.mark.usefixtures("tiny_speed_workload")
@pytest.mark.parametrize(
    ("answer", "scenario", "cause"),
    [
        (amp_step(order="clip-scaled"), "fp16, small gradients", "unscale_(optimizer) must come"),
        (amp_step(order="clip-after-step"), "fp16, large gradients", "clipping did not act"),
        (scaler_per_step, "fp16, large gradients", "a new GradScaler was made in each"),
        (amp_step(backward_in_autocast=True), "fp16, large gradients", "backward ran inside"),
        (amp_step(fp16_scaler=False), "fp16, small gradients", "the loss was not scaled"),
        (amp_step(forward_in_autocast=False), "bf16", "not bfloat16"),
    ],
    ids=["clip-scaled", "clip-after-step", "scaler-never-backs-off", "backward-in-autocast",
         "fp16-no-scaler", "forward-fp32"],
)  # fmt: skip
def test_amp_step_scenarios_fail_mistakes_naming_the_cause(answer, scenario, cause):
    parts = {p.name: p for p in _body(answer)}
    assert parts[scenario].status == "failed"
    assert cause in parts[scenario].message, parts[scenario].message


@pytest.mark.usefixtures("tiny_speed_workload")
def test_amp_step_check_fails_a_wrong_order_and_errors_on_a_missing_update():
    assert fails(lesson.check_amp_step, amp_step(order="clip-scaled")) == "failed"
    exc = failure(lesson.check_amp_step, amp_step(order="no-update"))  # torch refuses step 2
    assert exc.status == "failed" and "scaler.update() was never called" in exc.summary


def test_amp_step_check_reports_not_attempted_and_refuses_the_reference():
    assert fails(lesson.check_amp_step, not_attempted) == "not-attempted"

    def delegating(*args):
        return lesson.reference_make_amp_step(*args)

    assert "reference" in failure(lesson.check_amp_step, delegating).summary


def fake_effect(speedup):
    return demo.AmpEffect("faked", "bfloat16", speedup, 1000, 500, None)


@pytest.mark.parametrize(
    ("cls", "speedup", "status"),
    [
        ("cpu-bf16", 1.8, "passed"),
        ("cpu-bf16", 1.0, "failed"),
        ("cuda-tensorcore", 1.4, "failed"),
        ("cuda-tensorcore", 2.5, "passed"),
        ("cpu", 0.4, "not-applicable"),
        ("cuda", 1.0, "not-applicable"),
        ("mps", 1.0, "not-applicable"),
    ],
)
def test_speed_part_is_graded_only_where_the_device_has_fast_low_precision(cls, speedup, status):
    part = checks._speed_part(fake_effect(speedup), cls)
    assert part.status == status
    if cls == "cpu":
        assert "emulated" in part.message and "0.4" in part.message


@pytest.mark.parametrize(
    ("cls", "speedup", "says"),
    [("cpu", 0.2, "emulated"), ("cpu-bf16", 1.8, "pays off"), ("cpu-bf16", 0.9, "busy machine"),
     ("cuda", 1.0, "memory is what AMP saves")],
)  # fmt: skip
def test_amp_verdict_explains_the_measurement_for_the_device_class(cls, speedup, says):
    effect = demo.AmpEffect(cls, "bfloat16", speedup, 1000, 500, None)
    assert says in lesson.amp_verdict(effect) and f"{speedup:.2f}x" in lesson.amp_verdict(effect)


def test_amp_step_check_retries_a_slow_measurement_then_fails_it(monkeypatch):
    calls = []

    def slow(make_step, device=None, repeats=None):
        calls.append(1)
        return fake_effect(1.05)

    monkeypatch.setattr(checks, "_measure_speed", slow)  # the check's own timing (grading v3)
    monkeypatch.setattr(checks, "device_class", lambda device=None: "cpu-bf16")
    exc = failure(lesson.check_amp_step, lesson.reference_make_amp_step)
    assert "speed" in exc.summary and len(calls) == 3


# --- exercise 3 is a diagnosis: the colleague's step in the notebook ------------------------


def colleagues_step(fixed=()):
    """The notebook's colleague step (cell 04-colleague-step), with the named mistakes fixed."""
    cell = next(c for c in authoring.read(SOLUTION).cells if c.get("id") == "04-colleague-step")
    source = cell.source
    edits = {
        "backward": ("            scaler.scale(loss).backward()\n", ""),
        "backward-outside": (
            "        torch.nn.utils.clip_grad_norm_",
            "        scaler.scale(loss).backward()\n        torch.nn.utils.clip_grad_norm_",
        ),
        "scaler-once": (
            "    def step(x, y):\n        scaler = torch.amp.GradScaler(device.type)\n",
            "    scaler = torch.amp.GradScaler(device.type)\n\n    def step(x, y):\n",
        ),
        "unscale": (
            "        torch.nn.utils.clip_grad_norm_",
            "        scaler.unscale_(optimizer)\n        torch.nn.utils.clip_grad_norm_",
        ),
    }
    for fix in fixed:
        for old, new in [edits[fix]] + ([edits["backward-outside"]] if fix == "backward" else []):
            assert old in source, fix
            source = source.replace(old, new, 1)
    namespace = {"torch": torch, "lesson": lesson}
    exec(compile(source, "04-colleague-step", "exec"), namespace)
    return namespace["colleagues_make_amp_step"]


SOLUTION = Path(__file__).parents[1] / "solutions" / "04_mixed_precision.ipynb"
FULL_ONLY = pytest.mark.skipif(  # 4-14 s each; their causes are covered by amp_step(...) above
    os.environ.get("COURSE_REDTEAM") != "all", reason="CI budget: COURSE_REDTEAM=all runs it"
)


def test_symptom_table_shows_the_colleagues_symptoms_without_naming_a_cause():
    table = lesson.symptom_table(colleagues_step())
    rows = {line.split("|")[1].strip(): line.split("|")[2:-1] for line in table.splitlines()[2:]}
    assert [c.strip() for c in rows["autocast on in backward"]] == ["True"] * 3
    assert rows["steps skipped"][0].strip() == f"{scenarios.STEPS}/{scenarios.STEPS}"
    assert "unscale" not in table and "GradScaler" not in table  # measurements, no causes


@pytest.mark.usefixtures("tiny_speed_workload")
@pytest.mark.parametrize(
    ("fixed", "scenario", "cause"),
    [
        ((), "bf16", "backward ran inside autocast"),
        pytest.param(
            ("backward",), "fp16, large gradients", "one GradScaler, outside", marks=FULL_ONLY
        ),
        pytest.param(
            ("backward", "scaler-once"),
            "fp16, small gradients",
            "unscale_(optimizer) must come",
            marks=FULL_ONLY,
        ),
    ],
    ids=["as-given", "backward-fixed", "scaler-fixed-too"],  # the rest: amp_step(...) above
)
def test_colleagues_step_fails_naming_the_next_mistake_until_all_are_fixed(fixed, scenario, cause):
    parts = {p.name: p for p in _body(colleagues_step(fixed))}
    assert parts[scenario].status == "failed"
    assert cause in parts[scenario].message, parts[scenario].message


# --- exercise 2: a float32 island ---------------------------------------------------------


def island_einsum(q, k):
    with torch.autocast(device_type=q.device.type, enabled=False):
        scores = torch.einsum("id,jd->ij", q.to(torch.float32), k.to(torch.float32))
    return torch.softmax(scores, dim=-1)


def elementwise_in_fp32(q, k):
    """Not on autocast's lists: mul and sum run in float32 on float32 inputs."""
    return (q.float()[:, None, :] * k.float()[None]).sum(-1).softmax(-1)


def only_floated(q, k):
    return (q.float() @ k.float().T).softmax(-1)


def only_disabled(q, k):
    with torch.autocast(q.device.type, enabled=False):
        return (q @ k.T).softmax(-1)


def rescaled(q, k):
    with torch.autocast(q.device.type, enabled=False):
        return (q.float() @ k.float().T / q.shape[-1] ** 0.5).softmax(-1)


def bf16_island(q, k):
    with torch.autocast(q.device.type, enabled=False):
        return (q.bfloat16() @ k.bfloat16().T).softmax(-1)


def back_to_half(q, k):
    with torch.autocast(q.device.type, enabled=False):
        return (q.double() @ k.double().T).to(q.dtype).softmax(-1)


def cuda_island_on_cpu(q, k):
    with torch.autocast("cuda", enabled=False):
        return (q.float() @ k.float().T).softmax(-1)


@pytest.mark.parametrize(
    "answer", [lesson.reference_stable_scores, island_einsum, elementwise_in_fp32]
)
def test_fp32_island_check_passes_the_reference_and_valid_alternatives(answer):
    assert lesson.check_fp32_island(answer).status == "passed"


@pytest.mark.parametrize(
    ("answer", "cause"),
    [
        (lesson.naive_scores, "only given float32 q and k AND with autocast off"),
        (only_floated, "Switch autocast off"),
        (only_disabled, "Cast q and k to float32"),
        (rescaled, "not softmax(q @ k.T"),
        (bf16_island, "it turns to 16 bits itself"),
        (back_to_half, "went back to 16 bits before the softmax"),
        (cuda_island_on_cpu, "Switch autocast off for q.device.type"),
    ],
    ids=[
        "unchanged",
        "float-only",
        "disabled-only",
        "changed-function",
        "bf16-island",
        "scores-back-to-half",
        "other-device-island",
    ],  # fmt: skip
)
def test_fp32_island_check_fails_mistakes_naming_the_cause(answer, cause):
    exc = failure(lesson.check_fp32_island, answer)
    assert exc.status == "failed"
    assert cause in exc.summary
    if answer is not rescaled:  # each keeps softmax(q @ k.T): only the precision is wrong
        assert "not softmax" not in exc.summary


def test_fp32_island_check_reports_not_attempted_and_refuses_the_reference():
    assert fails(lesson.check_fp32_island, not_attempted) == "not-attempted"
    delegating = lambda q, k: lesson.reference_stable_scores(q, k)  # noqa: E731
    assert "reference" in failure(lesson.check_fp32_island, delegating).summary


def test_naive_scores_overflow_or_lose_precision_under_fp16_autocast():
    for case in ("precision", "overflow"):
        q, k = demo.score_inputs(case)
        assert demo.score_error(lesson.naive_scores, q, k)[0] > 0.3
        assert demo.score_error(lesson.naive_scores, q.float(), k.float(), torch.bfloat16)[0] > 0.1


def test_fp16_parts_are_not_applicable_on_a_torch_without_cpu_fp16_autocast(monkeypatch):
    assert demo.cpu_fp16_autocast.__wrapped__() is True  # this torch has it
    monkeypatch.setattr(demo, "cpu_fp16_autocast", lambda: False)
    assert lesson.check_fp32_island(not_attempted).status == "not-applicable"
    assert lesson.check_loss_scale(not_attempted).status == "not-applicable"


# --- demos -------------------------------------------------------------------------------------


def test_precision_table_shows_fp16_range_and_bf16_precision():
    rows = {r["dtype"]: r for r in demo.precision_table()}
    assert rows["float16"]["max"] == 65504
    assert rows["float16"]["smallest subnormal"] == 2.0**-24
    assert rows["bfloat16"]["max"] > 3e38 and rows["bfloat16"]["eps (1 + eps > 1)"] == 2.0**-7


def test_scaler_trace_backs_off_on_overflow_skips_the_step_and_grows_again():
    trace = demo.scaler_trace(steps=20, overflow_at=(7,))
    assert trace.skipped == [i == 7 for i in range(20)]
    assert trace.scale[8] == trace.scale[7] / 2  # backoff_factor 0.5
    assert trace.scale[5] == 2 * trace.scale[4]  # growth after 5 clean steps
    assert max(trace.scale[8:]) > trace.scale[8]


def test_cpu_autocast_runs_matmul_in_low_precision_and_losses_in_float32():
    table = demo.autocast_dtypes(torch.device("cpu"), torch.bfloat16)
    assert table["matmul (x @ w)"] == table["conv2d"] == "bfloat16"
    assert table["cross_entropy(matmul)"] == table["mse_loss(matmul)"] == "float32"
    assert table["matmul + float32 tensor"] == "float32"


# --- judged outside the learner's kernel, as `course grade` does -----------------------------


def no_scaling(model, x, y):
    """fp16 autocast, the loss not scaled: the late snapshot's gradients underflow."""
    return scaled_grads(model, x, y, 1.0)


@pytest.mark.parametrize(
    "check_id, reference, wrong, local",
    [
        ("04-loss-scale", "reference_rescued_grads", no_scaling, lesson.check_loss_scale),
        ("04-fp32-island", "reference_stable_scores", only_floated, lesson.check_fp32_island),
        ("04-amp-step", "reference_make_amp_step", scaler_per_step, lesson.check_amp_step),
    ],
    ids=["04-loss-scale", "04-fp32-island", "04-amp-step"],
)
def test_judged_remotely_the_reference_passes_and_a_mistake_fails_as_in_a_notebook(
    monkeypatch, check_id, reference, wrong, local
):
    """The check body in this process (the judge: specimens drawn, float32 and float64
    values, the AMP step's float32 baseline and its timing), every call to the answer in a
    child (the kernel) through probes: the reference passes, a mistake gets its notebook
    verdict."""
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parent))
    ref = f"course_utils.lessons.mixed_precision.reference:{reference}"
    judged = remote_verdict(check_id, ref)
    assert judged["status"] == "passed", judged["message"]
    judged = remote_verdict(check_id, f"test_lesson_04:{wrong.__name__}")
    assert judged["status"] == fails(local, wrong) == "failed", judged["message"]


def test_the_timed_amp_steps_must_train_the_model(monkeypatch):
    """A step that returns the loss but never updates the weights is fast and trains nothing:
    the weights its timed steps leave are compared with float32 steps run by the check."""
    right = checks._measure_speed(Local(lesson.reference_make_amp_step), torch.device("cpu"), 2)
    assert right.work_error <= checks.THRESHOLDS["work_error"].value

    def forward_only(model, loss_fn, optimizer, device, dtype, max_norm):
        def step(x, y):
            with torch.autocast(device.type, dtype=dtype):
                return loss_fn(model(x), y).detach()

        return step

    lazy = checks._measure_speed(Local(forward_only), torch.device("cpu"), 2)
    assert lazy.work_error == pytest.approx(1.0)
    part = checks._work_part([lazy], checks.THRESHOLDS["work_error"].value)[0]
    assert part.status == "failed" and "must train the model" in part.message
