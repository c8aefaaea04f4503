"""Red team v4 (blind), notebook 04: 04-fp32-island and 04-amp-step.

Written from the learner and solution notebooks, `course_utils/checks.py`, `protocol.py` and
`redteam_helpers.py` only, never the lesson's checks or their tests. Each case is an answer
that mixes a right step with a wrong one (or a valid alternative), the verdict it deserves and,
for a wrong one, the cause the failing parts must name and causes they must not name.
"""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F
from redteam_helpers import FULL, assert_verdict, run_check
from torch import nn

from course_utils.lessons import mixed_precision as lesson

# A check that trains three scenarios and times a step costs seconds a call: outside CI's
# budget, run with COURSE_REDTEAM=all (or COURSE_REDTEAM_SLOW=1, as 04-07's SLOW cases).
SLOW = pytest.mark.skipif(
    not (FULL or os.environ.get("COURSE_REDTEAM_SLOW") == "1"),
    reason="slow red-team case: COURSE_REDTEAM=all or COURSE_REDTEAM_SLOW=1 runs it",
)

# --- 04-fp32-island: stable_scores(q, k), called under fp16 autocast -------------------------


def island_float_inside_autocast(q, k):
    """float32 inputs, but autocast still on: the matmul casts them back to float16."""
    return (q.float() @ k.float().T).softmax(dim=-1)


def island_disabled_but_fp16_inputs(q, k):
    """autocast switched off, inputs left float16: the matmul runs in float16 anyway."""
    with torch.autocast(q.device.type, enabled=False):
        return (q @ k.T).softmax(dim=-1)


def island_softmax_only(q, k):
    """The softmax in float32, the scores it reads already computed (and broken) in float16."""
    scores = q @ k.T
    with torch.autocast(q.device.type, enabled=False):
        return scores.float().softmax(dim=-1)


def island_softmax_dtype_arg(q, k):
    """softmax's dtype= argument: only the softmax is float32."""
    return torch.softmax(q @ k.T, dim=-1, dtype=torch.float32)


def island_bf16(q, k):
    """An island, but in bfloat16 ("it never overflows"): spacing 128 near 30000."""
    with torch.autocast(q.device.type, enabled=False):
        return (q.bfloat16() @ k.bfloat16().T).softmax(dim=-1)


def island_scores_back_to_half(q, k):
    """Scores made in float64, then cast back to q's dtype (float16) before the softmax."""
    with torch.autocast(q.device.type, enabled=False):
        scores = q.double() @ k.double().T
        return scores.to(q.dtype).softmax(dim=-1)


def island_wrong_device(q, k):
    """Copied from a CUDA recipe: switches off CUDA's autocast; the CPU's stays on."""
    with torch.autocast("cuda", enabled=False):
        return (q.float() @ k.float().T).softmax(dim=-1)


def island_max_subtract_in_fp16(q, k):
    """The 'stable softmax' trick, in float16: the scores already overflowed or rounded."""
    scores = q @ k.T
    return (scores - scores.max(dim=-1, keepdim=True).values).float().softmax(dim=-1)


def island_valid_float64(q, k):
    """Valid: the island in float64, returned as float32."""
    with torch.autocast(device_type=q.device.type, enabled=False):
        return torch.softmax(q.double() @ k.double().transpose(0, 1), dim=1).float()


def island_valid_einsum_amp_api(q, k):
    """Valid: torch.amp.autocast spelling, .to(float32), einsum, F.softmax."""
    with torch.amp.autocast(q.device.type, enabled=False):
        qf, kf = q.to(torch.float32), k.to(torch.float32)
        return F.softmax(torch.einsum("id,jd->ij", qf, kf), dim=-1)


def island_valid_decorated_helper(q, k):
    """Valid: a helper run with autocast off, its inputs cast first."""

    def scores(a, b):
        return torch.matmul(a, b.mT).softmax(-1)

    with torch.autocast(q.device.type, enabled=False):
        return scores(q.float(), k.float())


# every part says "under fp16 autocast": a cause must say more than that
AUTOCAST_ON = r"inside autocast|autocast (off|on|still)|turn autocast|switch autocast"
SCORES_F16 = r"matmul|scores?.{0,40}(float16|fp16|overflow)"  # the product, not the softmax
NOT_FUNCTION = r"not softmax"  # each of these keeps softmax(q @ k.T); only the precision is wrong
ISLAND = [
    pytest.param(
        island_float_inside_autocast,
        "failed",
        AUTOCAST_ON,
        (r"rescal",),
        id="wrong-float_inside_autocast",
    ),
    pytest.param(
        island_disabled_but_fp16_inputs,
        "failed",
        r"float16 (activations|inputs)|cast q and k",
        (r"autocast (is )?(still )?(on|enabled)",),
        id="wrong-disabled_but_fp16_inputs",
    ),
    pytest.param(
        island_softmax_only,
        "failed",
        SCORES_F16,
        (r"rescal", NOT_FUNCTION),
        id="wrong-softmax_only_float32",
    ),
    pytest.param(
        island_softmax_dtype_arg,
        "failed",
        SCORES_F16,
        (r"rescal", NOT_FUNCTION),
        id="wrong-softmax_dtype_arg",
    ),
    pytest.param(
        island_bf16,
        "failed",
        r"bfloat16|bf16",
        (r"overflowed", NOT_FUNCTION),  # "overflow case:" is a part's name
        id="wrong-bf16_island",
    ),
    pytest.param(
        island_scores_back_to_half,
        "failed",
        r"scores?.{0,40}(float16|fp16|half)|back to|before (the )?softmax",
        (r"rescal", r"cast q and k"),
        id="wrong-scores_back_to_half",
    ),
    pytest.param(
        island_wrong_device,
        "failed",
        AUTOCAST_ON,
        (r"rescal",),
        id="wrong-disables_cuda_autocast_on_cpu",
    ),
    pytest.param(
        island_max_subtract_in_fp16,
        "failed",
        SCORES_F16,
        (NOT_FUNCTION,),
        id="wrong-max_subtract_in_fp16",
    ),
    pytest.param(island_valid_float64, "passed", None, (), id="valid-float64_island"),
    pytest.param(island_valid_einsum_amp_api, "passed", None, (), id="valid-einsum_amp_api"),
    pytest.param(island_valid_decorated_helper, "passed", None, (), id="valid-helper_matmul_mT"),
]


@pytest.mark.parametrize("answer, expected, cause, not_causes", ISLAND)
def test_fp32_island(answer, expected, cause, not_causes):
    assert_verdict(run_check(lesson.check_fp32_island, answer), expected, cause, not_causes)


# --- 04-amp-step: make_amp_step(model, loss_fn, optimizer, device, dtype, max_norm) ----------


def _scaler(device, dtype):
    return torch.amp.GradScaler(device.type, enabled=dtype == torch.float16)


def _forward(model, loss_fn, device, dtype, x, y):
    with torch.autocast(device_type=device.type, dtype=dtype):
        return loss_fn(model(x), y)


def amp_clip_without_unscale(model, loss_fn, optimizer, device, dtype, max_norm):
    """Scaler outside, autocast right, but clips the scaled gradients (no unscale_)."""
    scaler = _scaler(device, dtype)

    def step(x, y):
        loss = _forward(model, loss_fn, device, dtype, x, y)
        scaler.scale(loss).backward()
        nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    return step


def amp_unscale_after_clip(model, loss_fn, optimizer, device, dtype, max_norm):
    """unscale_ present, but after the clip: clipping still reads scaled gradients."""
    scaler = _scaler(device, dtype)

    def step(x, y):
        loss = _forward(model, loss_fn, device, dtype, x, y)
        scaler.scale(loss).backward()
        nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.unscale_(optimizer)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    return step


def amp_scaler_per_step(model, loss_fn, optimizer, device, dtype, max_norm):
    """Everything in order, but a new GradScaler every step: the scale never learns."""

    def step(x, y):
        scaler = _scaler(device, dtype)
        loss = _forward(model, loss_fn, device, dtype, x, y)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    return step


def amp_update_before_step(model, loss_fn, optimizer, device, dtype, max_norm):
    """scaler.update() before scaler.step(): step then unscales a second time."""
    scaler = _scaler(device, dtype)

    def step(x, y):
        loss = _forward(model, loss_fn, device, dtype, x, y)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.update()
        scaler.step(optimizer)
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    return step


def amp_manual_unscale_then_scaler_step(model, loss_fn, optimizer, device, dtype, max_norm):
    """Unscales by hand (grad / scale) before the clip, then scaler.step divides again."""
    scaler = _scaler(device, dtype)

    def step(x, y):
        loss = _forward(model, loss_fn, device, dtype, x, y)
        scaler.scale(loss).backward()
        inv = 1.0 / scaler.get_scale()
        for p in model.parameters():
            if p.grad is not None:
                p.grad.mul_(inv)
        nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    return step


def amp_optimizer_step_not_scaler(model, loss_fn, optimizer, device, dtype, max_norm):
    """unscale_ and clip right, then optimizer.step(): an overflowed step is not skipped."""
    scaler = _scaler(device, dtype)

    def step(x, y):
        loss = _forward(model, loss_fn, device, dtype, x, y)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        optimizer.step()
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    return step


def amp_no_scaler(model, loss_fn, optimizer, device, dtype, max_norm):
    """Treats fp16 like bf16: autocast and clip right, no loss scaling at all."""

    def step(x, y):
        loss = _forward(model, loss_fn, device, dtype, x, y)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    return step


def amp_scaler_enabled_backwards(model, loss_fn, optimizer, device, dtype, max_norm):
    """The enabled= flag inverted: scaling for bf16, none for fp16."""
    scaler = torch.amp.GradScaler(device.type, enabled=dtype == torch.bfloat16)

    def step(x, y):
        loss = _forward(model, loss_fn, device, dtype, x, y)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    return step


def amp_no_zero_grad(model, loss_fn, optimizer, device, dtype, max_norm):
    """The reference order, but zero_grad forgotten: gradients pile up across steps."""
    scaler = _scaler(device, dtype)

    def step(x, y):
        loss = _forward(model, loss_fn, device, dtype, x, y)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(optimizer)
        scaler.update()
        return loss.detach()

    return step


def amp_returns_scaled_loss(model, loss_fn, optimizer, device, dtype, max_norm):
    """Right step, but returns the scaled loss (x 65536 under fp16)."""
    scaler = _scaler(device, dtype)

    def step(x, y):
        loss = _forward(model, loss_fn, device, dtype, x, y)
        scaled = scaler.scale(loss)
        scaled.backward()
        scaler.unscale_(optimizer)
        nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        return scaled.detach()

    return step


def amp_backward_inside_autocast(model, loss_fn, optimizer, device, dtype, max_norm):
    """Only the colleague's first mistake left: backward inside the autocast region."""
    scaler = _scaler(device, dtype)

    def step(x, y):
        with torch.autocast(device_type=device.type, dtype=dtype):
            loss = loss_fn(model(x), y)
            scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    return step


def amp_no_autocast(model, loss_fn, optimizer, device, dtype, max_norm):
    """A perfect scaler sequence around a float32 forward: no mixed precision at all."""
    scaler = _scaler(device, dtype)

    def step(x, y):
        loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    return step


def amp_valid_bf16_branch(model, loss_fn, optimizer, device, dtype, max_norm):
    """Valid: no scaler object for bf16, the full scaler sequence for fp16."""
    scaler = torch.amp.GradScaler(device.type) if dtype == torch.float16 else None

    def step(x, y):
        optimizer.zero_grad(set_to_none=True)
        with torch.amp.autocast(device.type, dtype=dtype):
            loss = loss_fn(model(x), y)
        if scaler is None:
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            optimizer.step()
        else:
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            scaler.step(optimizer)
            scaler.update()
        return loss.detach()

    return step


def amp_valid_scaler_always(model, loss_fn, optimizer, device, dtype, max_norm):
    """Valid: a scaler enabled for bf16 too (unneeded, harmless), zero_grad first, foreach."""
    scaler = torch.amp.GradScaler(device.type)
    params = [p for p in model.parameters() if p.requires_grad]

    def step(x, y):
        optimizer.zero_grad()
        with torch.autocast(device.type, dtype=dtype):
            out = model(x)
            loss = loss_fn(out, y)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        nn.utils.clip_grad_norm_(params, max_norm, foreach=True)
        scaler.step(optimizer)
        scaler.update()
        return loss.detach()

    return step


def amp_valid_total_norm_api(model, loss_fn, optimizer, device, dtype, max_norm):
    """Valid: get_total_norm + clip_grads_with_norm_ after unscale_, a float32 loss."""
    scaler = _scaler(device, dtype)
    params = list(model.parameters())

    def step(x, y):
        with torch.autocast(device_type=device.type, dtype=dtype):
            loss = loss_fn(model(x), y)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        grads = [p.grad for p in params if p.grad is not None]
        norm = nn.utils.get_total_norm(grads)
        nn.utils.clip_grads_with_norm_(params, max_norm, norm)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach().float()

    return step


NOT_BACKWARD = r"backward.{0,40}autocast|autocast.{0,40}backward"
NOT_PER_STEP = r"\bnew\b|every step|each step|per step"
AMP_STEP = [
    pytest.param(
        amp_clip_without_unscale,
        "failed",
        r"unscale",
        (NOT_PER_STEP, NOT_BACKWARD),
        id="wrong-clip_without_unscale",
    ),
    pytest.param(
        amp_unscale_after_clip,
        "failed",
        r"unscale",
        (NOT_PER_STEP, NOT_BACKWARD),
        id="wrong-unscale_after_clip",
    ),
    pytest.param(
        amp_scaler_per_step,
        "failed",
        r"created once|outside step|one (Grad)?scaler|new GradScaler|scale is state",
        (r"unscale|clip",),
        id="wrong-scaler_per_step",
    ),
    pytest.param(
        amp_update_before_step,
        "failed",
        r"update|twice|again|order",
        (NOT_BACKWARD,),
        id="wrong-update_before_step",
    ),
    pytest.param(
        amp_manual_unscale_then_scaler_step,
        "failed",
        r"twice|again|double|unscal",
        (NOT_PER_STEP, NOT_BACKWARD),
        id="wrong-manual_unscale_then_scaler_step",
    ),
    pytest.param(
        amp_optimizer_step_not_scaler,
        "failed",
        r"not skipped|changed the parameters|through scaler\.step|use scaler\.step",
        (r"unscale_ .*before|clip.*before", r"returns the loss"),
        id="wrong-optimizer_step_not_scaler",
    ),
    pytest.param(
        amp_no_scaler,
        "failed",
        r"not scaled|underflow|GradScaler for fp16",
        (NOT_BACKWARD, r"clip"),
        id="wrong-no_scaler_fp16",
    ),
    pytest.param(
        amp_scaler_enabled_backwards,
        "failed",
        r"not scaled|underflow|GradScaler for fp16",
        (NOT_BACKWARD, r"clip"),
        id="wrong-scaler_enabled_inverted",
    ),
    pytest.param(
        amp_no_zero_grad,
        "failed",
        r"zero_grad|accumulat|previous step",
        (r"unscale", NOT_BACKWARD),
        id="wrong-no_zero_grad",
    ),
    pytest.param(
        amp_returns_scaled_loss,
        "failed",
        r"return(s|ed)? .{0,40}loss",
        (r"unscale|clip", NOT_BACKWARD),
        id="wrong-returns_scaled_loss",
    ),
    pytest.param(
        amp_backward_inside_autocast,
        "failed",
        r"backward.{0,30}autocast",
        (r"unscale|clip",),
        id="wrong-backward_inside_autocast",
    ),
    pytest.param(
        amp_no_autocast,
        "failed",
        r"under torch\.autocast|output was float32|bytes saved|memory",
        (r"unscale|clip",),
        id="wrong-no_autocast",
    ),
    pytest.param(amp_valid_bf16_branch, "passed", None, (), id="valid-bf16_branch_no_scaler"),
    pytest.param(amp_valid_scaler_always, "passed", None, (), id="valid-scaler_always_enabled"),
    pytest.param(amp_valid_total_norm_api, "passed", None, (), id="valid-total_norm_api"),
]
AMP_STEP = [
    p if p.id == "wrong-scaler_per_step" else pytest.param(*p.values, marks=SLOW, id=p.id)
    for p in AMP_STEP
]


@pytest.mark.parametrize("answer, expected, cause, not_causes", AMP_STEP)
def test_amp_step(answer, expected, cause, not_causes):
    assert_verdict(run_check(lesson.check_amp_step, answer), expected, cause, not_causes)
