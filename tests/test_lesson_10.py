"""Lesson 10's checks pass the reference answers and valid alternatives, and fail the habits
and mistakes learners keep, naming the cause.

Timing is measured only where a test is about speed; tests about results or syncs replace
the interleaved timing with a stub, so the file stays short on a loaded 2-core machine.
"""

from __future__ import annotations

import contextlib
import importlib
import os
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from check_helpers import fails, failure, not_attempted, status_of
from judge_helpers import remote_verdict

from course_utils.checks import REGISTRY
from course_utils.lessons import habits as lesson
from course_utils.lessons.habits import checks as habit_checks
from course_utils.lessons.habits.loop import BETAS, EPS, LR, WEIGHT_DECAY
from course_utils.probes import Local


def part(check, answer, name):
    """One part of a check's verdict (the check body, run without the cell's wrapper, given
    the answer as the wrapper hands it: a probes.Local, which observe runs here)."""
    return next(p for p in check.__wrapped__(Local(answer)) if p.name == name)


@pytest.fixture
def no_timing(monkeypatch):
    """Skip the interleaved timing: these tests are about results and syncs."""
    monkeypatch.setattr(habit_checks, "_speed", lambda fn, steps, every: (5.0, 5.0, 1.0))


def keeping(*habits):
    """The fixed loop with these habits left in (a learner who fixed all the others)."""

    def train(model, data, steps, device, eval_every=10):
        return lesson.variant_train(model, data, steps, device, habits, eval_every)

    return train


def fast_with(optimizer_fn, zero_grad=True):
    """A clean loop with a learner's choice of optimizer."""

    def train(model, data, steps, device, eval_every=10):
        model.to(device).train()
        x, y = torch.from_numpy(data.x).to(device), torch.from_numpy(data.y).to(device)
        xv, yv = torch.from_numpy(data.x_val).to(device), torch.from_numpy(data.y_val).to(device)
        weight = torch.tensor(data.class_weights, device=device)
        optimizer, b = optimizer_fn(model.parameters()), data.batch_size
        n, losses, accs = len(data.x) // b, [], []
        for step in range(steps):
            i = (step % n) * b
            loss = F.cross_entropy(model(x[i : i + b]), y[i : i + b], weight=weight)
            if zero_grad:
                optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.detach())
            if (step + 1) % eval_every == 0:
                model.eval()
                with torch.no_grad():
                    accs.append((model(xv).argmax(1) == yv).float().mean().item())
                model.train()
        return lesson.TrainLog(torch.stack(losses).tolist(), accs)

    return train


def adamw(fused=False):
    kw = {"fused": True} if fused else {"foreach": True}
    return lambda params: torch.optim.AdamW(params, LR, BETAS, EPS, WEIGHT_DECAY, **kw)


# --- exercise 1: fix the slow loop ---------------------------------------------------------


def test_slow_train_its_costless_twin_and_the_fix_log_the_same_run():
    """The check compares learners with variant_train(SLOW_MATH): it must be slow_train's run."""
    data, cpu = lesson.make_data(), torch.device("cpu")
    slow = lesson.quiet(lesson.slow_train, lesson.make_model(), data, 10, cpu, 5)
    twin = lesson.variant_train(lesson.make_model(), data, 10, cpu, habit_checks.SLOW_MATH, 5)
    fixed = lesson.reference_fast_train(lesson.make_model(), data, 10, cpu, 5)
    assert slow.losses == twin.losses and slow.val_accuracy == twin.val_accuracy
    assert (
        np.allclose(slow.losses, fixed.losses, rtol=1e-5)
        and slow.val_accuracy == fixed.val_accuracy
    )


def found_habits(found) -> list[str]:
    """The habits a diagnosis of a 10-step run with validation every 5 steps holds."""
    return found.habits(habit_checks.allowed_syncs(10, 5), TENSOR_OPS)


TENSOR_OPS = habit_checks.THRESHOLDS["tensor-ops"].value


def test_spy_finds_every_habit_alone_and_none_in_the_reference():
    for habit in lesson.HABITS:
        _, found = lesson.diagnose(keeping(habit), 10, 5)
        assert found_habits(found) == [habit]
    _, found = lesson.diagnose(lesson.reference_fast_train, 10, 5)
    assert found_habits(found) == [] and found.n_syncs == 2


class HandSGD(torch.optim.Optimizer):
    """A learner's Optimizer: one parameter tensor at a time, through .data."""

    def __init__(self, params, lr=LR):
        super().__init__(params, {"lr": lr})

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                p.data.add_(p.grad, alpha=-group["lr"])


@pytest.mark.parametrize(
    "optimizer_fn, loop",
    [
        (lambda p: torch.optim.AdamW(p, LR, BETAS, EPS, WEIGHT_DECAY, foreach=False), True),
        (lambda p: HandSGD(p), True),
        (lambda p: torch.optim.AdamW(p, LR, BETAS, EPS, WEIGHT_DECAY), False),
        (adamw(fused=True), False),
    ],
    ids=["torch-for-loop", "own-optimizer-class", "torch-default", "fused"],
)
def test_spy_tells_a_per_tensor_optimizer_from_torchs_choice(optimizer_fn, loop):
    """foreach=False and a learner's own per-tensor step are loops; the default (foreach=None:
    torch's choice for the device) and fused are not."""
    _, found = lesson.diagnose(fast_with(optimizer_fn), 10, 5)
    assert found.loop_optimizer(TENSOR_OPS) is loop


def test_spy_counts_no_graph_for_validation_with_frozen_parameters():
    """requires_grad_(False) around validation records no graph and updates no parameter."""

    def frozen_validation(model, data, steps, device, eval_every=10):
        model.to(device).train()
        xv, yv = torch.from_numpy(data.x_val).to(device), torch.from_numpy(data.y_val).to(device)
        log = fast_with(adamw())(model, data, steps, device, eval_every)
        model.eval().requires_grad_(False)
        (model(xv).argmax(1) == yv).float().mean()
        model.train().requires_grad_(True)
        return log

    _, found = lesson.diagnose(frozen_validation, 10, 5)
    assert found.eval_forwards_with_grad == 0 and found.param_inplace_ops == 0


def test_fast_train_check_passes_the_reference_fix():
    assert lesson.check_fast_train(lesson.reference_fast_train).status == "passed"


def test_fast_train_check_passes_fused_adamw_with_an_item_per_validation(no_timing):
    assert lesson.check_fast_train(fast_with(adamw(fused=True))).status == "passed"


@pytest.mark.parametrize(
    "fixed, named",
    [("anomaly", "the profiler left on"), ("profiler", "anomaly detection left on")],
    ids=["only-anomaly-fixed", "only-profiler-fixed"],
)
def test_fast_train_check_fails_a_single_fix_on_speed_naming_the_biggest_remaining_cost(
    fixed, named, monkeypatch
):
    monkeypatch.setattr(habit_checks, "steps_and_every", lambda: (10, 5))  # half the work
    only_one_fixed = keeping(*(h for h in lesson.HABITS if h != fixed))
    speed = part(lesson.check_fast_train, only_one_fixed, "speed")
    assert speed.status == "failed" and f"biggest cost still in your loop: {named}" in speed.message


@pytest.mark.parametrize(
    "habit, name, said",
    [
        ("loop-optimizer", "optimizer", "one parameter tensor at a time"),
        ("eval-autograd", "validation without autograd", "torch.inference_mode()"),
    ],
)
def test_fast_train_check_fails_a_cheap_habit_by_its_probe_not_its_time(
    habit, name, said, no_timing, monkeypatch
):
    """Each costs too little on a CPU for the timing to fail it (0.78 and 0.74 of the fix)."""
    monkeypatch.setattr(habit_checks, "steps_and_every", lambda: (10, 5))  # half the work
    probe = part(lesson.check_fast_train, keeping(habit), name)
    assert probe.status == "failed" and said in probe.message


def test_fast_train_check_fails_torchs_for_loop_optimizer_by_its_flag(no_timing, monkeypatch):
    monkeypatch.setattr(habit_checks, "steps_and_every", lambda: (10, 5))  # half the work
    adamw_for_loop = fast_with(
        lambda p: torch.optim.AdamW(p, LR, BETAS, EPS, WEIGHT_DECAY, foreach=False)
    )
    probe = part(lesson.check_fast_train, adamw_for_loop, "optimizer")
    assert probe.status == "failed" and "foreach=False" in probe.message


def test_fast_train_check_fails_an_item_every_step_even_on_a_cpu(no_timing):
    syncs = part(lesson.check_fast_train, keeping("syncs"), "syncs")
    assert syncs.status == "failed" and "x item" in syncs.message


@pytest.mark.parametrize(
    "wrong",
    [
        fast_with(lambda p: torch.optim.Adam(p, LR, BETAS, EPS, WEIGHT_DECAY)),  # L2, not AdamW
        fast_with(lambda p: torch.optim.AdamW(p)),  # the default lr, not slow_train's
        fast_with(adamw(), zero_grad=False),  # gradients accumulate
    ],
    ids=["adam-with-l2", "adamw-default-lr", "no-zero-grad"],
)
def test_fast_train_check_fails_different_results(wrong, no_timing):
    same = part(lesson.check_fast_train, wrong, "same results")
    assert same.status == "failed"


def test_fast_train_check_reports_not_attempted_and_refuses_the_reference():
    assert fails(lesson.check_fast_train, not_attempted) == "not-attempted"

    def delegating(model, data, steps, device, eval_every=10):
        return lesson.reference_fast_train(model, data, steps, device, eval_every)

    assert fails(lesson.check_fast_train, delegating) == "failed"


# --- exercise 2: share when you can, copy when you must ----------------------------------


def try_then_copy(data, dtype=None):
    """Valid alternative: let torch try, copy into native order only when it refuses."""
    try:
        return torch.as_tensor(data, dtype=dtype)
    except ValueError:
        return torch.as_tensor(np.array(data, dtype=data.dtype.newbyteorder("=")), dtype=dtype)


def from_numpy_then_to(data, dtype=None):
    """Valid alternative: from_numpy where it works, .to(dtype) (a no-op for the same dtype)."""
    if not isinstance(data, np.ndarray):
        return torch.tensor(data, dtype=dtype)
    if not data.dtype.isnative or any(s < 0 or s % data.itemsize for s in data.strides):
        data = data.astype(data.dtype.newbyteorder("="), order="C")
    t = torch.from_numpy(data)
    return t if dtype is None else t.to(dtype)


def as_tensor_only(data, dtype=None):
    return torch.as_tensor(data, dtype=dtype)


def copy_keeps_byte_order(data, dtype=None):
    """Copies a flipped view, but .copy() keeps the file's byte order."""
    if isinstance(data, np.ndarray) and min(data.strides) < 0:
        data = data.copy()
    return torch.as_tensor(data, dtype=dtype)


def contiguous_first(data, dtype=None):
    data = np.ascontiguousarray(data, dtype=np.asarray(data).dtype.newbyteorder("="))
    return torch.as_tensor(data, dtype=dtype)


def bytes_reinterpreted(data, dtype=None):
    """Reads big-endian bytes as native ones (a view, no conversion): wrong values."""
    if isinstance(data, np.ndarray):
        data = np.ascontiguousarray(data).view(data.dtype.newbyteorder("="))
    return torch.as_tensor(data, dtype=dtype)


def dtype_ignored(data, dtype=None):
    return try_then_copy(data)


def list_as_float64(data, dtype=None):
    return try_then_copy(np.asarray(data), dtype)


def negative_strides_only(data, dtype=None):
    """The old solution: copies flips and foreign byte order, not a packed record field."""
    if isinstance(data, np.ndarray) and (not data.dtype.isnative or min(data.strides) < 0):
        data = np.ascontiguousarray(data, dtype=data.dtype.newbyteorder("="))
    return torch.as_tensor(data, dtype=dtype)


def numpy_copy_then_torch_tensor(data, dtype=None):
    """Two copies where one is needed: numpy's, then torch.tensor's."""
    try:
        return torch.as_tensor(data, dtype=dtype)
    except ValueError:
        return torch.tensor(np.array(data, dtype=data.dtype.newbyteorder("=")), dtype=dtype)


def lists_in_float32(data, dtype=None):
    return (
        torch.tensor(data, dtype=dtype or torch.float32)
        if isinstance(data, list)
        else (try_then_copy(data, dtype))
    )


@pytest.mark.parametrize(
    "right", [try_then_copy, from_numpy_then_to], ids=["try-then-copy", "from-numpy-then-to"]
)
def test_to_tensor_check_passes_conversions_that_share_when_they_can(right):
    assert lesson.check_to_tensor(right).status == "passed"


@pytest.mark.parametrize(
    "wrong, cause",
    [
        (as_tensor_only, "negative, and tensors with negative strides"),
        (torch.tensor, "it is a copy"),
        (copy_keeps_byte_order, "byte order different from the native"),
        (contiguous_first, "does NOT show in the tensor"),
        (bytes_reinterpreted, "the values differ"),
        (dtype_ignored, "expected torch.float32 (asked for)"),
        (list_as_float64, "torch's for Python numbers"),
        (negative_strides_only, "raised ValueError"),
        (numpy_copy_then_torch_tensor, "two copies where one suffices"),
        (lists_in_float32, "expected torch.int64 (torch's for Python numbers)"),
    ],
    ids=["as_tensor-alone", "torch.tensor", "copy-keeps-byte-order", "contiguous-first",
         "bytes-reinterpreted", "dtype-ignored", "list-as-float64", "record-field-not-copied",
         "two-copies", "lists-in-float32"],
)  # fmt: skip
def test_to_tensor_check_fails_conversions_that_copy_needlessly_or_not_at_all(wrong, cause):
    assert cause in failure(lesson.check_to_tensor, wrong).summary


def test_to_tensor_check_reports_not_attempted_and_refuses_the_reference():
    assert fails(lesson.check_to_tensor, not_attempted) == "not-attempted"
    assert (
        fails(lesson.check_to_tensor, lambda a, dtype=None: lesson.reference_to_tensor(a))
        == "failed"
    )


def test_every_specimen_that_cannot_share_is_one_torch_refuses_or_must_convert():
    from course_utils.lessons.habits.conversion import specimens

    for name, s in specimens().items():
        if s.can_share:
            assert lesson.shares_memory(torch.as_tensor(s.data, dtype=s.dtype), s.data), name
        elif isinstance(s.data, np.ndarray) and s.dtype is None:
            with pytest.raises(ValueError):
                torch.from_numpy(s.data)


# --- exercise 3: evaluate without autograd -------------------------------------------------


def evaluate_with(context, eval_mode=True, restore="was"):
    def evaluate(model, x, y, batch_size=256):
        was = model.training
        if eval_mode:
            model.eval()
        with context():
            hits = sum(
                (model(x[i : i + batch_size]).argmax(1) == y[i : i + batch_size]).sum().item()
                for i in range(0, len(x), batch_size)
            )
        if restore == "was":
            model.train(was)
        elif restore == "train":
            model.train()
        return hits / len(x)

    return evaluate


def test_evaluate_check_passes_inference_mode_and_no_grad():
    assert lesson.check_evaluate(lesson.reference_evaluate).status == "passed"
    assert lesson.check_evaluate(evaluate_with(torch.no_grad)).status == "passed"


def test_evaluate_check_fails_a_forgotten_eval_naming_batchnorm_and_dropout():
    accuracy = part(
        lesson.check_evaluate, evaluate_with(torch.no_grad, eval_mode=False), "accuracy"
    )
    assert accuracy.status == "failed" and "model.eval()" in accuracy.message


def test_evaluate_check_fails_autograd_left_on():
    import contextlib

    saved = part(
        lesson.check_evaluate, evaluate_with(contextlib.nullcontext), "nothing saved for backward"
    )
    assert saved.status == "failed" and saved.value > 0


@pytest.mark.parametrize(
    "restore, name",
    [("train", "eval mode kept"), ("none", "mode restored")],
    ids=["always-train", "never"],
)
def test_evaluate_check_fails_a_mode_not_restored(restore, name):
    assert (
        part(lesson.check_evaluate, evaluate_with(torch.no_grad, restore=restore), name).status
        == "failed"
    )


def test_evaluate_check_fails_freezing_the_parameters_instead_of_no_grad():
    def frozen(model, x, y, batch_size=256):
        for p in model.parameters():
            p.requires_grad_(False)
        return evaluate_with(__import__("contextlib").nullcontext)(model, x, y, batch_size)

    assert part(lesson.check_evaluate, frozen, "still trainable").status == "failed"


def test_colleague_evaluate_shows_its_symptoms_and_the_check_names_each_fault():
    """Exercise 3's specimen: two calls disagree (Dropout on), autograd is off afterwards, and
    with eval mode added the mean of per-batch accuracies is still named."""
    model, x, y = lesson.eval_specimen()
    try:
        first = lesson.colleague_evaluate(model, x, y)
        second = lesson.colleague_evaluate(model, x, y)
        assert first != second and not torch.is_grad_enabled()
    finally:
        torch.set_grad_enabled(True)
    try:
        accuracy = part(lesson.check_evaluate, lesson.colleague_evaluate, "accuracy")
        assert accuracy.status == "failed" and "model.eval()" in accuracy.message
    finally:
        torch.set_grad_enabled(True)

    def with_eval(model, x, y, batch_size=256):
        model.eval()
        return lesson.colleague_evaluate(model, x, y, batch_size)

    for name, said in [
        ("accuracy", "mean of per-batch accuracies"),
        ("autograd left on", "OFF for the whole program"),
        ("mode restored", "restore the mode"),
    ]:
        try:
            found = part(lesson.check_evaluate, with_eval, name)
        finally:
            torch.set_grad_enabled(True)
        assert found.status == "failed" and said in found.message, (name, found.message)


def test_evaluate_check_names_only_the_module_types_that_ran_in_train_mode():
    """Dropout put in eval mode alone: the forward pre-hooks see only BatchNorm training."""

    def dropout_only(model, x, y, batch_size=256):
        for m in model.modules():
            if isinstance(m, torch.nn.Dropout):
                m.eval()
        out = evaluate_with(torch.no_grad, eval_mode=False)(model, x, y, batch_size)
        model.train()
        return out

    accuracy = part(lesson.check_evaluate, dropout_only, "accuracy")
    assert accuracy.status == "failed" and "BatchNorm" in accuracy.message
    assert "Dropout" not in accuracy.message


def test_evaluate_check_fails_autograd_switched_on_for_a_no_grad_caller():
    def back_to_true(model, x, y, batch_size=256):
        torch.set_grad_enabled(False)
        try:
            return evaluate_with(contextlib.nullcontext)(model, x, y, batch_size)
        finally:
            torch.set_grad_enabled(True)

    off = part(lesson.check_evaluate, back_to_true, "autograd left off")
    assert off.status == "failed" and "torch.no_grad()" in off.message
    assert part(lesson.check_evaluate, back_to_true, "autograd left on").status == "passed"


def test_evaluate_check_requires_a_python_float_not_a_tensor():
    def tensor(model, x, y, batch_size=256):
        return torch.tensor(evaluate_with(torch.no_grad)(model, x, y, batch_size))

    assert part(lesson.check_evaluate, tensor, "accuracy").status == "passed"
    number = part(lesson.check_evaluate, tensor, "a Python float")
    assert number.status == "failed" and "torch.Tensor" in number.message


def test_evaluate_check_reports_not_attempted_and_refuses_the_reference():
    assert fails(lesson.check_evaluate, not_attempted) == "not-attempted"
    assert fails(lesson.check_evaluate, lambda *a: lesson.reference_evaluate(*a)) == "failed"


# --- demos -----------------------------------------------------------------------------------


def test_zero_grad_none_skips_the_step_and_zero_still_decays():
    moved = lesson.zero_grad_effect()
    assert moved["grad None (default)"] == 0 and moved["grad zeroed (set_to_none=False)"] > 0


def test_remaining_cost_message_claims_the_cpus_cost_order_only_on_a_cpu():
    """COST_ORDER was measured on a CPU; on a GPU class the speed message lists what is left
    and says their order there was never measured, instead of naming a biggest. (The check
    itself passes the device class in; running it here costs ~30 s under load.)"""
    left = ["numpy-copies", "host-tensors"]
    gpu = habit_checks.remaining_costs(left, "cuda-tensorcore")
    assert (
        "biggest cost still" not in gpu and "still in your loop: numpy-copies, host-tensors" in gpu
    )
    assert "order on cuda-tensorcore was never measured" in gpu
    for cls in ("cpu", "cpu-bf16"):
        cpu = habit_checks.remaining_costs(left, cls)
        assert cpu.startswith(f"; the biggest cost still in your loop: {lesson.HABITS[left[0]]}")
    assert habit_checks.remaining_costs([], "cuda") == ""


# --- judged as `course grade` judges: the check's body here, the answer in another process ---

REFERENCE = "course_utils.lessons.habits.reference"
REDTEAM = Path(__file__).resolve().parent / "redteam"


@pytest.fixture
def redteam_answers(monkeypatch):
    """The red team's answers importable by "module:name", here and in the judged process."""
    monkeypatch.syspath_prepend(str(REDTEAM))
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(REDTEAM), os.environ.get("PYTHONPATH", "")])
    )


JUDGED = [  # check id, its reference answer, a wrong answer of the red team (module:name)
    ("10-fast-train", "reference_fast_train", "test_10_habits:wrong_unweighted_loss"),
    ("10-to-tensor", "reference_to_tensor", "test_10_to_tensor:wrong_torch_tensor_always"),
    ("10-evaluate", "reference_evaluate", "test_10_habits:wrong_no_eval_mode"),
]


@pytest.mark.parametrize(("check_id", "reference", "wrong"), JUDGED, ids=[j[0] for j in JUDGED])
def test_the_judge_passes_the_reference_and_grades_a_wrong_answer_as_the_notebook_does(
    check_id, reference, wrong, redteam_answers
):
    """Every call of the learner's code goes through a probe, results cross as data, and
    nothing is shared between a probe and the body: judged with the answer in another
    process (tests/judge_helpers.py), the reference passes, and a red-team answer gets the
    status it gets in a notebook."""
    judged = remote_verdict(check_id, f"{REFERENCE}:{reference}")
    assert judged["status"] == "passed", judged["message"]
    module, _, name = wrong.partition(":")
    in_notebook = status_of(REGISTRY[check_id], getattr(importlib.import_module(module), name))
    judged = remote_verdict(check_id, wrong)
    assert judged["status"] == in_notebook, judged["message"]
