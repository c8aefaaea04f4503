"""amp_calls records a learner's GradScaler, clip and optimizer calls in order, changing none."""

import torch
from torch import nn

from course_utils.amp_calls import CallLog, watch


def _step(model, opt, scaler, x, clip_first=False):
    opt.zero_grad()
    scaler.scale(model(x).square().mean()).backward()
    if not clip_first:
        scaler.unscale_(opt)
    nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()


def test_a_right_step_is_recorded_in_order_with_the_norm_the_clip_was_handed():
    torch.manual_seed(0)
    model, x = nn.Linear(4, 2), torch.randn(8, 4)
    opt = torch.optim.SGD(model.parameters(), 0.1)
    log = CallLog()
    with watch(opt, log):
        scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
        log.step = 0
        _step(model, opt, scaler, x)
    assert [e.what for e in log.of("scaler")] == ["scaler"]
    assert log.order(0) == ["scale", "unscale_", "clip", "step", "optimizer.step", "update"]
    (inner,) = log.of("optimizer.step", 0)
    assert inner.inside and inner.finite
    assert log.of("clip", 0)[0].norm < 100  # unscaled: float32's norm, not 1024 times it


def test_a_clip_before_unscale_is_handed_the_scaled_norm_and_the_step_is_unchanged():
    torch.manual_seed(0)
    model, x = nn.Linear(4, 2), torch.randn(8, 4)
    twin = nn.Linear(4, 2)
    twin.load_state_dict(model.state_dict())
    opts = [torch.optim.SGD(m.parameters(), 0.1) for m in (model, twin)]
    log = CallLog()
    with watch(opts[0], log):
        scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
        log.step = 0
        _step(model, opts[0], scaler, x, clip_first=True)
    _step(twin, opts[1], torch.amp.GradScaler("cpu", init_scale=1024.0), x, clip_first=True)
    assert log.order(0)[:2] == ["scale", "clip"]
    assert log.of("clip", 0)[0].norm > 100
    for a, b in zip(model.parameters(), twin.parameters(), strict=True):
        assert torch.equal(a, b)  # recording changed nothing
