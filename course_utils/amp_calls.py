"""What a learner's AMP step called, in order, and what each optimizer.step() was handed.

Lessons 04 (the AMP step) and 08 (clipping under a GradScaler) name a cause only where a
measurement confirms it ("your clip ran before unscale_", "a new GradScaler every step",
"optimizer.step() on inf gradients"): this records the GradScaler calls (class-wide, so any
spelling counts), clip_grad_norm_ calls made through torch.nn.utils with the norm they were
handed, and each optimizer.step() with the gradients it used. It only records: every call
goes through to PyTorch unchanged.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field
from unittest import mock

import torch
from torch import nn


@dataclass
class Event:
    """One call seen during a learner's step: `what` is "scaler" (a GradScaler made), "scale",
    "unscale_" (called by the learner, not by scaler.step), "step" (scaler.step), "update",
    "clip" (clip_grad_norm_) or "optimizer.step"; `norm` the gradients' total norm it was
    handed; `scale` the scaler's scale then; `inside` True for an optimizer.step that
    scaler.step made; `finite` whether the gradients it was handed were finite; `zeros` the
    share of their entries that were exactly zero; `who` the id() of the GradScaler called."""

    step: int
    what: str
    who: int = 0
    norm: float = math.nan
    scale: float = math.nan
    inside: bool = False
    finite: bool = True
    zeros: float = 0.0


@dataclass
class CallLog:
    """Every Event of a scenario, with the step (0-based) each belongs to; -1 is
    make_amp_step itself."""

    events: list[Event] = field(default_factory=list)
    step: int = -1
    in_scaler_step: bool = False

    def of(self, what: str, step: int | None = None) -> list[Event]:
        return [e for e in self.events if e.what == what and (step is None or e.step == step)]

    def order(self, step: int) -> list[str]:
        return [e.what for e in self.events if e.step == step]


def _grad_stats(params) -> tuple[float, bool, float]:
    """(total 2-norm, all finite, share of exact zeros) of the .grad of `params` (nan, True,
    0 if none has one)."""
    grads = [p.grad.detach().float().flatten() for p in params if p.grad is not None]
    if not grads:
        return math.nan, True, 0.0
    flat = torch.cat(grads)
    finite = bool(torch.isfinite(flat).all())
    return flat.norm().item(), finite, (flat == 0).float().mean().item()


@contextlib.contextmanager
def watch(optimizer: torch.optim.Optimizer, log: CallLog):
    """Record into `log` the GradScaler calls (class-wide, so any spelling counts), the
    clip_grad_norm_ calls made through torch.nn.utils, and each optimizer.step() with the
    gradients it used. Only records: every call goes through to PyTorch unchanged."""
    cls = torch.amp.GradScaler
    original = {
        name: getattr(cls, name) for name in ("__init__", "scale", "unscale_", "step", "update")
    }
    clip = nn.utils.clip_grad_norm_

    def add(what, **kw):
        log.events.append(Event(log.step, what, **kw))

    def init(self, *a, **kw):
        original["__init__"](self, *a, **kw)
        add("scaler", who=id(self))

    def scale(self, outputs):
        add("scale", who=id(self))
        return original["scale"](self, outputs)

    def unscale_(self, opt):
        if not log.in_scaler_step:
            add("unscale_", who=id(self), scale=self.get_scale())
        return original["unscale_"](self, opt)

    def step(self, opt, *a, **kw):
        add("step", who=id(self), scale=self.get_scale())
        log.in_scaler_step = True
        try:
            return original["step"](self, opt, *a, **kw)
        finally:
            log.in_scaler_step = False

    def update(self, *a, **kw):
        add("update", who=id(self), scale=self.get_scale())
        return original["update"](self, *a, **kw)

    def clip_grad_norm_(parameters, *a, **kw):
        params = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
        add("clip", norm=_grad_stats(params)[0])
        return clip(params, *a, **kw)

    def before_step(opt, args, kwargs):
        norm, finite, zeros = _grad_stats(p for g in opt.param_groups for p in g["params"])
        add("optimizer.step", norm=norm, inside=log.in_scaler_step, finite=finite, zeros=zeros)

    hook = optimizer.register_step_pre_hook(before_step)
    with contextlib.ExitStack() as stack:
        for name, fn in [("__init__", init), ("scale", scale), ("unscale_", unscale_),
                         ("step", step), ("update", update)]:  # fmt: skip
            stack.enter_context(mock.patch.object(cls, name, fn))
        for module in (nn.utils, nn.utils.clip_grad):
            stack.enter_context(mock.patch.object(module, "clip_grad_norm_", clip_grad_norm_))
        try:
            yield log
        finally:
            hook.remove()
