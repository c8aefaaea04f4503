"""Red team v4 (blind), notebook 08: 08-amp-clip (`amp_clipped_step`).

Written from the learner and solution notebooks, `course_utils/checks.py`, `protocol.py` and
`redteam_helpers.py` only, never the lesson's checks or their tests. Each case mixes a right
step with a wrong one (or is a valid alternative); `names` must and `not_names` must not be
named by the parts that did not pass.
"""

from __future__ import annotations

import pytest
import torch
from redteam_helpers import assert_graded, case, grade
from torch import nn

import course_utils as cu
from course_utils.lessons import clipping as lesson


def _forward(model, loss_fn, x, y, dtype=None):
    with torch.autocast(x.device.type, dtype=dtype or cu.amp_dtype(x.device)):
        return loss_fn(model(x), y)


def wrong_unscale_after_clip(model, loss_fn, x, y, optimizer, scaler, max_norm):
    """unscale_ is there, one line too late: the clip reads scaled gradients."""
    optimizer.zero_grad(set_to_none=True)
    scaler.scale(_forward(model, loss_fn, x, y)).backward()
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.unscale_(optimizer)
    scaler.step(optimizer)
    scaler.update()
    return norm


def wrong_manual_unscale(model, loss_fn, x, y, optimizer, scaler, max_norm):
    """Unscales by hand before the clip; scaler.step then divides a second time."""
    optimizer.zero_grad(set_to_none=True)
    scaler.scale(_forward(model, loss_fn, x, y)).backward()
    scale = scaler.get_scale()
    for p in model.parameters():
        if p.grad is not None:
            p.grad.div_(scale)
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return norm


def wrong_returns_item(model, loss_fn, x, y, optimizer, scaler, max_norm):
    """The right order, but the norm returned as a float (.item(): a sync per step)."""
    optimizer.zero_grad(set_to_none=True)
    scaler.scale(_forward(model, loss_fn, x, y)).backward()
    scaler.unscale_(optimizer)
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return norm.item()


def wrong_optimizer_step(model, loss_fn, x, y, optimizer, scaler, max_norm):
    """unscale_ and clip right, then optimizer.step(): an inf step is taken, not skipped."""
    optimizer.zero_grad(set_to_none=True)
    scaler.scale(_forward(model, loss_fn, x, y)).backward()
    scaler.unscale_(optimizer)
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    scaler.update()
    return norm


def wrong_no_update(model, loss_fn, x, y, optimizer, scaler, max_norm):
    """unscale_, clip, scaler.step, but no scaler.update(): the scale never backs off."""
    optimizer.zero_grad(set_to_none=True)
    scaler.scale(_forward(model, loss_fn, x, y)).backward()
    scaler.unscale_(optimizer)
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    return norm


def wrong_update_before_step(model, loss_fn, x, y, optimizer, scaler, max_norm):
    """update() before step(): step unscales again, with the updated scale."""
    optimizer.zero_grad(set_to_none=True)
    scaler.scale(_forward(model, loss_fn, x, y)).backward()
    scaler.unscale_(optimizer)
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.update()
    scaler.step(optimizer)
    return norm


def wrong_no_zero_grad(model, loss_fn, x, y, optimizer, scaler, max_norm):
    """The reference order without zero_grad: gradients add up across calls."""
    scaler.scale(_forward(model, loss_fn, x, y)).backward()
    scaler.unscale_(optimizer)
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return norm


def wrong_ignores_scaler(model, loss_fn, x, y, optimizer, scaler, max_norm):
    """ "bf16 needs no scaler": plain backward, clip, optimizer.step; nothing is skipped."""
    optimizer.zero_grad(set_to_none=True)
    _forward(model, loss_fn, x, y).backward()
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return norm


def wrong_fp16_everywhere(model, loss_fn, x, y, optimizer, scaler, max_norm):
    """The right order, but float16 hard-coded instead of cu.amp_dtype(x.device)."""
    optimizer.zero_grad(set_to_none=True)
    scaler.scale(_forward(model, loss_fn, x, y, torch.float16)).backward()
    scaler.unscale_(optimizer)
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return norm


def wrong_returns_clipped_norm(model, loss_fn, x, y, optimizer, scaler, max_norm):
    """The right step, but returns the norm after clipping (at most max_norm)."""
    optimizer.zero_grad(set_to_none=True)
    scaler.scale(_forward(model, loss_fn, x, y)).backward()
    scaler.unscale_(optimizer)
    nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    norm = nn.utils.get_total_norm([p.grad for p in model.parameters() if p.grad is not None])
    scaler.step(optimizer)
    scaler.update()
    return norm


def wrong_returns_scaled_norm(model, loss_fn, x, y, optimizer, scaler, max_norm):
    """Logs the norm of the scaled gradients (computed before unscale_), clips correctly."""
    optimizer.zero_grad(set_to_none=True)
    scaler.scale(_forward(model, loss_fn, x, y)).backward()
    norm = nn.utils.get_total_norm([p.grad for p in model.parameters() if p.grad is not None])
    scaler.unscale_(optimizer)
    nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return norm


def valid_clip_scaled_with_scaled_threshold(model, loss_fn, x, y, optimizer, scaler, max_norm):
    """Valid: clip the scaled gradients to max_norm * S (the same coefficient), let
    scaler.step unscale; return the scaled norm / S, a tensor."""
    optimizer.zero_grad(set_to_none=True)
    scaler.scale(_forward(model, loss_fn, x, y)).backward()
    scale = scaler.get_scale()
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm * scale)
    scaler.step(optimizer)
    scaler.update()
    return norm / scale


def valid_total_norm_api(model, loss_fn, x, y, optimizer, scaler, max_norm):
    """Valid: get_total_norm + clip_grads_with_norm_ after unscale_, a parameter list."""
    params = list(model.parameters())
    optimizer.zero_grad()
    with torch.amp.autocast(device_type=x.device.type, dtype=cu.amp_dtype(x.device)):
        out = model(x)
        loss = loss_fn(out, y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    norm = nn.utils.get_total_norm([p.grad for p in params if p.grad is not None])
    nn.utils.clip_grads_with_norm_(params, max_norm, norm)
    scaler.step(optimizer)
    scaler.update()
    return norm


def valid_foreach_set_to_none_false(model, loss_fn, x, y, optimizer, scaler, max_norm):
    """Valid: zero_grad(set_to_none=False), foreach clip, error_if_nonfinite=False."""
    optimizer.zero_grad(set_to_none=False)
    loss = _forward(model, loss_fn, x, y)
    scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    norm = torch.nn.utils.clip_grad_norm_(
        [p for p in model.parameters() if p.requires_grad],
        max_norm,
        norm_type=2.0,
        error_if_nonfinite=False,
        foreach=True,
    )
    scaler.step(optimizer)
    scaler.update()
    return norm


CASES = [
    case(wrong_unscale_after_clip, names=r"unscale", not_names=r"\.item|float\(|sync|skip"),
    case(wrong_manual_unscale, names=r"twice|again|double|unscal", not_names=r"\.item|sync"),
    case(wrong_returns_item, names=r"tensor|\.item|float|sync", not_names=r"unscale|clip"),
    case(
        wrong_optimizer_step,
        names=r"not skipped|changed the parameters|through scaler\.step",
        not_names=r"\.item|sync",
    ),
    case(wrong_no_update, names=r"update", not_names=r"\.item|sync"),
    case(
        wrong_update_before_step,
        names=r"update|twice|again|order",
        not_names=r"\.item|sync|by hand|never called",
    ),
    case(wrong_no_zero_grad, names=r"zero_grad|accumulat|previous|add up", not_names=r"\.item"),
    case(wrong_ignores_scaler, names=r"skip|scaler|scale", not_names=r"\.item|sync"),
    case(
        wrong_fp16_everywhere,
        names=r"float16|fp16|dtype|amp_dtype|precision",
        not_names=r"unscale|\.item",
    ),
    case(wrong_returns_clipped_norm, names=r"after clipping|before clip", not_names=r"\.item|sync"),
    case(
        wrong_returns_scaled_norm,
        names=r"norm of the scaled|scaled gradients",
        not_names=r"\.item|sync|skip",
    ),
    case(valid_clip_scaled_with_scaled_threshold, "passed"),
    case(valid_total_norm_api, "passed"),
    case(valid_foreach_set_to_none_false, "passed"),
]


@pytest.mark.parametrize("fn, expect, names, not_names", CASES)
def test_amp_clip(fn, expect, names, not_names):
    assert_graded(grade(lesson.check_amp_clipped_step, fn), expect, names, not_names)
