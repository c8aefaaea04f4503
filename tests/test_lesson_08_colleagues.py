"""The broken code lesson 08's diagnose-and-fix exercises show fails its check naming the
cause, a half fix still fails naming what is left, and the symptom tables tell them apart."""

from __future__ import annotations

import math

import pytest
import torch
from check_helpers import cells_of, failure
from torch import nn

import course_utils as cu
from course_utils.lessons import clipping as lesson

pytestmark = pytest.mark.usefixtures("one_thread")

SHOWN = cells_of(
    "08_gradient_clipping",
    "08-colleague-norm",
    "08-colleague-steps",
    "08-colleague-accum",
    cu=cu,
)


# --- exercise 1: the colleague's norm logger -------------------------------------------------


def norm_of_norms_read_twice(parameters, norm_type=2.0):
    """The sum fixed, the generator still read twice."""
    if not any(p.grad is not None for p in parameters):
        return torch.tensor(0.0)
    grads = [p.grad for p in parameters if p.grad is not None]
    return torch.linalg.vector_norm(
        torch.stack([torch.linalg.vector_norm(g, norm_type) for g in grads]), norm_type
    )


def list_first_still_summed(parameters, norm_type=2.0):
    """The generator fixed, the per-tensor norms still summed."""
    return SHOWN["colleagues_total_norm"](list(parameters), norm_type)


def max_for_inf_only(parameters, norm_type=2.0):
    """Fixes the inf column (a max) and keeps the sum for every p."""
    grads = [p.grad for p in list(parameters) if p.grad is not None]
    norms = [torch.linalg.vector_norm(g, norm_type) for g in grads]
    return max(norms) if math.isinf(norm_type) else sum(norms)


@pytest.mark.parametrize(
    ("wrong", "message"),
    [
        (SHOWN["colleagues_total_norm"], "clip_grad_norm_ returns"),
        (norm_of_norms_read_twice, "generator"),
        (list_first_still_summed, "SUM of the per-tensor norms"),
        (max_for_inf_only, "SUM of the per-tensor norms"),
    ],
    ids=["as-shown", "sum-fixed-only", "generator-fixed-only", "inf-fixed-only"],
)
def test_the_colleagues_norm_and_half_fixes_fail_naming_what_is_left(wrong, message):
    assert message in failure(lesson.check_total_norm, wrong).summary


def test_the_norm_table_marks_the_colleague_wrong_and_the_reference_right():
    colleague = lesson.norm_table(SHOWN["colleagues_total_norm"])
    rows = dict(
        (tuple(cell.strip() for cell in row.split("|")[1:3]), row)
        for row in colleague.splitlines()[2:]
    )
    assert "✗" not in rows["one tensor", "list"]  # one tensor, read once: the sum is right
    assert rows["two layers", "list"].split("|")[3].strip().endswith("✓")  # p=1: sum is right
    assert all("✗" in rows[kind, "generator"] for kind in ("one tensor", "two layers"))
    assert "✗" not in lesson.norm_table(lesson.reference_total_norm)


# --- exercise 2: the colleague's clipped steps -----------------------------------------------


@pytest.mark.parametrize("shown", ["colleagues_clipped_step", "colleagues_second_try"])
def test_the_colleagues_steps_fail_as_unclipped(shown):
    assert "UNCLIPPED" in failure(lesson.check_clipped_step, SHOWN[shown]).summary


def test_the_colleagues_steps_diverge_and_log_what_their_clipping_saw():
    first = lesson.train_rnn(SHOWN["colleagues_clipped_step"], 1.0, steps=150)
    second = lesson.train_rnn(SHOWN["colleagues_second_try"], 1.0, steps=150)
    assert first.diverged and second.diverged
    assert all(n == 0 for n in first.norm)  # clipping before backward saw no gradient
    assert max(n for n in second.norm if math.isfinite(n)) > 1.0  # real norms, unclipped step


# --- exercise 4: the colleague's accumulated step ----------------------------------------------


def clipped_last_but_summed(model, loss_fn, micro_batches, optimizer, max_norm):
    """The clip moved after the loop, the division by the number of micro-batches lost."""
    optimizer.zero_grad(set_to_none=True)
    for x, y in micro_batches:
        loss_fn(model(x), y).backward()
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return norm


def fixed_but_item(model, loss_fn, micro_batches, optimizer, max_norm):
    """The clip moved after the loop, the norm read back with .item()."""
    optimizer.zero_grad(set_to_none=True)
    for x, y in micro_batches:
        (loss_fn(model(x), y) / len(micro_batches)).backward()
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return norm.item()


@pytest.mark.parametrize(
    ("wrong", "message"),
    [
        (SHOWN["colleagues_accumulated_step"], "clipped after EVERY micro-batch"),
        (clipped_last_but_summed, "SUM of the micro-batch gradients"),
        (fixed_but_item, "host-device sync"),
    ],
    ids=["as-shown", "clip-moved-sum-kept", "item"],
)
def test_the_colleagues_accumulated_step_and_half_fixes_fail_naming_the_cause(wrong, message):
    assert message in failure(lesson.check_accumulated_clipped_step, wrong).summary


def test_the_accumulation_table_marks_only_acting_clips_of_several_micro_batches_wrong():
    """Is the colleague's step right with one micro-batch and with clipping idle, wrong
    otherwise, and the reference right everywhere?"""
    table = lesson.accumulation_table(SHOWN["colleagues_accumulated_step"])
    rows = {row.split("|")[1].strip(): row.split("|")[2:4] for row in table.splitlines()[2:]}
    assert all("✓" in idle for idle, _ in rows.values())
    assert "✓" in rows["1 × 64"][1]
    assert all("✗" in acts for k, (_, acts) in rows.items() if k != "1 × 64")
    assert "✗" not in lesson.accumulation_table(lesson.reference_accumulated_clipped_step)
