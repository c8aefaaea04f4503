"""What the 08-amp-clip check observes of a learner's `amp_clipped_step`, and the causes those
observations confirm.

Four calls on lesson 08's AMP problem: two normal steps, one whose input overflows (it must be
skipped, the scale lowered), and a normal one after it (it must be taken: gradients left over
from the skipped step would keep every later step skipped). While they run,
`course_utils.amp_calls.watch` records the scaler calls in order, the norm each
clip_grad_norm_ was handed and each optimizer.step() with its gradients; hooks on the model
record the forward's output dtype, the gradient reaching the output, and any .grad left over
when backward began. A message names a cause only when one of these measured it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import torch
from torch import nn

from ...amp_calls import CallLog, Event, watch
from ...device import get_device
from . import demo

# PyTorch's words when scaler.step comes twice without update() in between
NO_UPDATE = ("unscale_() is being called after step()", "step() has already been called")
BLOW_UP, AFTER = 2, 3  # the call with inf gradients, and the normal call after it
# A norm "equals" the reference's (or the scale times it) within this: a step in another order
# but the same dtype gives the reference's norm to < 0.001%; the causes it tells apart differ by
# the scale, 2**16. An output gradient below 1/SCALED of the reference's was never scaled.
NORM_MATCH, SCALED = 0.05, 8


@dataclass
class AmpRun:
    """Four calls of a step: the parameters and the scale after each, what each returned,
    PyTorch's refusal if any, and what was observed while they ran."""

    params: list[list[torch.Tensor]] = field(default_factory=list)
    norms: list[object] = field(default_factory=list)
    scales: list[float] = field(default_factory=list)  # the scale after each call
    refused: str | None = None
    calls: CallLog = field(default_factory=CallLog)
    out_dtypes: list[str] = field(default_factory=list)
    out_grad: list[float] = field(default_factory=list)  # largest |gradient| at the output
    stale: list[bool] = field(default_factory=list)  # .grad held values as backward began
    scaler_id: int = 0  # id() of the GradScaler the step was given


def _hooks(model: nn.Module, run: AmpRun):
    def on_grad(grad):  # backward has reached the output, before any parameter's gradient
        run.out_grad.append(grad.detach().abs().max().float().item())
        run.stale.append(any(p.grad is not None and bool(p.grad.ne(0).any()) for p in params))

    def on_forward(module, args, out):
        run.out_dtypes.append(str(out.dtype).replace("torch.", ""))
        if out.requires_grad:
            out.register_hook(on_grad)

    params = list(model.parameters())
    return model.register_forward_hook(on_forward)


def amp_run(step, max_norm: float = 1.0, calls: int = 4, seed: int = 0) -> AmpRun:
    """Up to `calls` calls of `step` on a fresh AMP problem (demo.amp_problem(seed)), the third
    with inf gradients; the optimizer has two param groups, so that clipping only the first
    shows."""
    model, optimizer, scaler, x, y = demo.amp_problem(get_device(), seed)
    params = list(model.parameters())
    optimizer = torch.optim.SGD(
        [{"params": params[:2]}, {"params": params[2:]}], **optimizer.defaults
    )
    run = AmpRun(scaler_id=id(scaler))
    hook = _hooks(model, run)
    try:
        with watch(optimizer, run.calls):
            for i in range(calls):
                run.calls.step = i
                inputs = x
                if i == BLOW_UP:
                    inputs = x.clone()
                    inputs[0, 0] = 3e38  # overflows in the forward: the gradients are inf/NaN
                try:
                    loss_fn = nn.functional.mse_loss
                    run.norms.append(step(model, loss_fn, inputs, y, optimizer, scaler, max_norm))
                except RuntimeError as exc:
                    if not any(words in str(exc) for words in NO_UPDATE):
                        raise
                    run.refused = str(exc).splitlines()[0]
                    break
                run.params.append([p.detach().clone() for p in model.parameters()])
                run.scales.append(scaler.get_scale())
    finally:
        hook.remove()
    return run


def as_data(run: AmpRun) -> dict:
    """An AmpRun as plain data (its call log as a list of events), to cross course_utils.wire."""
    fields = {f.name: getattr(run, f.name) for f in dataclasses.fields(run) if f.name != "calls"}
    return {**fields, "events": [dataclasses.asdict(e) for e in run.calls.events]}


def from_data(data: dict) -> AmpRun:
    """The AmpRun that `as_data` described, its call log rebuilt (so .of and .order work)."""
    names = {f.name for f in dataclasses.fields(AmpRun)} - {"calls"}
    events = [Event(**event) for event in data["events"]]
    return AmpRun(**{k: data[k] for k in names}, calls=CallLog(events))


def same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return all(torch.allclose(x, y, rtol=1e-4, atol=1e-6) for x, y in zip(a, b, strict=True))


def unmoved(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    """Bit for bit: a skipped step leaves every parameter exactly as it was (a step on
    gradients divided by the scale twice moves them by ~1e-6, which `same` would miss)."""
    return all(torch.equal(x, y) for x, y in zip(a, b, strict=True))


def refused(run: AmpRun) -> str:
    """PyTorch refused a call: say which, and why where the call order shows it."""
    said = f"PyTorch refused call {len(run.norms) + 1} (it raised)"
    for i in range(len(run.norms) + 1):
        order = run.calls.order(i)
        if "update" in order and "step" in order and order.index("update") < order.index("step"):
            return (
                f"{said}: in call {i + 1} your scaler.update() ran before "
                "scaler.step(optimizer); update() closes the step, so step() counted as a new "
                "one. Call update() last, after step()"
            )
    if not [e for e in run.calls.of("update") if e.who == run.scaler_id]:
        return (
            f"{said}: scaler.update() was never called after scaler.step(optimizer); call it "
            "at the end of every step"
        )
    return f"{said}: {run.refused!r}"


def first_step(run: AmpRun, want: AmpRun, w: float, scale: float) -> str:
    """Why the first call's parameters differ from unscale_ -> clip -> scaler.step -> update,
    from what that call measured (its own, not a replay's)."""
    if run.out_dtypes[:1] != want.out_dtypes[:1]:
        return (
            f"the model's output was {run.out_dtypes[0] if run.out_dtypes else 'never computed'}"
            f", not {want.out_dtypes[0]}: the forward did not run under "
            "torch.autocast(x.device.type, dtype=cu.amp_dtype(x.device)) on this device"
        )
    order = run.calls.order(0)
    if "update" in order and "step" in order and order.index("update") < order.index("step"):
        return (
            "your scaler.update() ran before scaler.step(optimizer): update() closes the step, "
            "so step() divided the gradients by the scale again after your unscale_ and clip"
        )
    if run.out_grad and want.out_grad and run.out_grad[0] < want.out_grad[0] / SCALED:
        return (
            f"the gradient reaching the output was 1/{want.out_grad[0] / run.out_grad[0]:.3g} "
            "of the scaled step's: backward ran on the loss itself, not on scaler.scale(loss), "
            "so dividing by the scale shrank gradients that were never multiplied"
        )
    bad = [e for e in run.calls.of("optimizer.step", 0) if not e.finite]
    if bad:
        return "optimizer.step() was handed inf/NaN gradients in a normal step"
    clips = run.calls.of("clip", 0)
    if len(clips) == 1 and math.isclose(clips[0].norm, w * scale, rel_tol=NORM_MATCH):
        late = "unscale_" in order and order.index("unscale_") > order.index("clip")
        return (
            f"clip_grad_norm_ was handed gradients of norm {clips[0].norm:.4g}, the scale "
            f"({scale:g}) times their true norm {w:.4g}: you clipped the SCALED gradients, "
            + ("and your scaler.unscale_(optimizer) came after the clip" if late else "")
            + ("" if late else "before any scaler.unscale_(optimizer)")
            + "; unscale_ must come before clip_grad_norm_"
        )
    taken = [e for e in run.calls.of("optimizer.step", 0) if e.finite]
    if taken and len(clips) == 1 and math.isclose(clips[0].norm, w, rel_tol=NORM_MATCH):
        if "unscale_" not in order and math.isclose(taken[0].norm * scale, 1.0, rel_tol=NORM_MATCH):
            return (
                f"clip_grad_norm_ was handed gradients already divided by the scale (norm "
                f"{clips[0].norm:.4g}), without scaler.unscale_(optimizer): scaler.step then "
                f"divided them AGAIN (norm at optimizer.step {taken[0].norm:.3g}). Divide once: "
                "scaler.unscale_(optimizer) instead of dividing yourself"
            )
    return (
        "parameters differ from unscale_ -> clip -> scaler.step -> update"
        + (f"; the gradients optimizer.step() used had norm {taken[0].norm:.4g}" if taken else "")
        + ": compare your order of calls with the AMP examples"
    )


def leftover(run: AmpRun) -> str | None:
    """Gradients left from the previous call when backward began, if measured."""
    stale = [i for i, s in enumerate(run.stale) if s]
    if not stale:
        return None
    return (
        f"when backward began in call {stale[0] + 1}, .grad still held the previous call's "
        "gradients: they add up across steps (and after an inf step, inf stays in .grad, so "
        "every later step is skipped). Clear them once per step (optimizer.zero_grad)"
    )


def inf_step(run: AmpRun, want_scale: float) -> str | None:
    """Why the call with inf gradients was not skipped, or left the wrong scale."""
    direct = [e for e in run.calls.of("optimizer.step", BLOW_UP) if not e.finite and not e.inside]
    if direct:
        return (
            "the inf/NaN step changed the parameters: optimizer.step() ran on those gradients, "
            "called directly, not through scaler.step(optimizer), which skips such a step"
        )
    if not unmoved(run.params[BLOW_UP], run.params[BLOW_UP - 1]):
        return (
            "the inf/NaN step changed the parameters: it was not skipped (no optimizer.step() "
            "on inf gradients was seen, so they changed some other way)"
        )
    scale = run.scales[BLOW_UP]
    if scale == want_scale:
        return None
    said = f"scale {scale:g} after the inf step, expected {want_scale:g}"
    updates = [e for e in run.calls.of("update") if e.who == run.scaler_id]
    if not updates:
        return f"{said}: scaler.update() was never called on the scaler you were given"
    skipped = [i + 1 for i in range(BLOW_UP + 1) if _skipped(run, i)]
    if scale < want_scale and len(skipped) > 1:
        return (
            f"{said}: the scaler skipped calls {skipped} (their gradients held inf/NaN), not "
            "only the inf one, and backed off at each"
        )
    return f"{said}: scaler.update() ran {len(updates)} times in {BLOW_UP + 1} calls"


def _skipped(run: AmpRun, call: int) -> bool:
    """Whether scaler.step ran in `call` without letting optimizer.step() run."""
    steps = [e for e in run.calls.of("step", call) if e.who == run.scaler_id]
    inner = [e for e in run.calls.of("optimizer.step", call) if e.inside]
    return bool(steps) and not inner
