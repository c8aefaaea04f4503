"""Why an answer of lesson 08 is wrong, decided on the check's side (the judge, under `course
grade`): wrong steps the checks replay to confirm a cause before naming it (a message says
"you clipped each tensor on its own" only when a step that does exactly that ends with the
learner's parameters), the usual ways a total norm goes wrong, and the statistic a threshold
rule follows. Nothing here runs the learner's code: the probes (probes.py) do."""

from __future__ import annotations

import math
import statistics

import torch
from torch import nn

from ...amp_calls import Event
from . import demo


def as_float(value) -> float | None:
    """A returned norm as a float: a one-element tensor or a number; None for anything else."""
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return float(value)
    return float(value) if isinstance(value, int | float) else None


def _backward(model, loss_fn, x, y, optimizer) -> list[torch.Tensor]:
    optimizer.zero_grad(set_to_none=True)
    loss_fn(model(x), y).backward()
    return [p for p in model.parameters() if p.grad is not None]


def total_norm(params) -> torch.Tensor:
    """The total 2-norm of the gradients, as torch computes it (a replay is not the learner's
    answer to exercise 1, which may not call it: the learner edition ships this)."""
    return nn.utils.get_total_norm([p.grad.detach() for p in params])


def per_tensor(model, loss_fn, x, y, optimizer, max_norm):
    params = _backward(model, loss_fn, x, y, optimizer)
    norm = total_norm(params)
    for p in params:
        nn.utils.clip_grad_norm_([p], max_norm)
    optimizer.step()
    return norm


def inf_norm(model, loss_fn, x, y, optimizer, max_norm):
    params = _backward(model, loss_fn, x, y, optimizer)
    norm = total_norm(params)
    nn.utils.clip_grad_norm_(params, max_norm, norm_type=math.inf)
    optimizer.step()
    return norm


def first_group(model, loss_fn, x, y, optimizer, max_norm):
    params = _backward(model, loss_fn, x, y, optimizer)
    norm = total_norm(params)
    nn.utils.clip_grad_norm_(optimizer.param_groups[0]["params"], max_norm)
    optimizer.step()
    return norm


def no_zero_grad(model, loss_fn, x, y, optimizer, max_norm):
    loss_fn(model(x), y).backward()
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return norm


def _clip_by(params, total: torch.Tensor, max_norm: float) -> None:
    coef = max_norm / (float(total) + 1e-6)
    if coef < 1:
        for p in params:
            p.grad.mul_(coef)


def squared_norm(model, loss_fn, x, y, optimizer, max_norm):
    params = _backward(model, loss_fn, x, y, optimizer)
    norm = total_norm(params)
    _clip_by(params, sum(p.grad.pow(2).sum() for p in params), max_norm)
    optimizer.step()
    return norm


def sum_of_norms(model, loss_fn, x, y, optimizer, max_norm):
    params = _backward(model, loss_fn, x, y, optimizer)
    norm = total_norm(params)
    _clip_by(params, sum(p.grad.norm() for p in params), max_norm)
    optimizer.step()
    return norm


def always_rescaled(model, loss_fn, x, y, optimizer, max_norm):
    params = _backward(model, loss_fn, x, y, optimizer)
    norm = total_norm(params)
    for p in params:
        p.grad.mul_(max_norm / norm)
    optimizer.step()
    return norm


# mistake -> (a step that makes exactly it, what to tell a learner whose parameters match)
STEP_MISTAKES = {
    "unclipped": (
        demo.unclipped_step,
        "parameters equal an UNCLIPPED step: clip after backward() and before step()",
    ),
    "by value": (
        demo.by_value_step,
        "you clipped each entry (by value); the exercise asks to clip the total norm",
    ),
    "per tensor": (
        per_tensor,
        "you clipped each tensor's norm on its own; clip_grad_norm_ scales every gradient by "
        "one factor, from the norm of all of them together",
    ),
    "squared norm": (
        squared_norm,
        "you scaled the gradients by max_norm over the SUM OF SQUARES of the entries: the total "
        "norm is its square root",
    ),
    "sum of norms": (
        sum_of_norms,
        "you scaled the gradients by max_norm over the sum of each tensor's norm: the total "
        "norm is the 2-norm of all entries together, the square root of the summed squares "
        "(what your function of exercise 1 returns)",
    ),
    "inf norm": (
        inf_norm,
        "you clipped the largest entry (norm_type=inf); the exercise clips the total 2-norm",
    ),
    "first group": (
        first_group,
        "you clipped only the first param group's parameters (the optimizer has two): clip "
        "every parameter the optimizer updates",
    ),
    "no zero_grad": (
        no_zero_grad,
        "gradients accumulate from one step to the next: zero them before each backward()",
    ),
    "always rescaled": (
        always_rescaled,
        "you rescaled a gradient whose norm was already below max_norm; clipping only shortens "
        "a gradient that is longer than max_norm",
    ),
}


def _events(events: list) -> list[Event]:
    return [e if isinstance(e, Event) else Event(**e) for e in events]


def unmoved(events: list, max_norm: float) -> str:
    """Why two steps left the parameters where they were, from what the first step called."""
    calls = [e for e in _events(events) if e.step == 0]
    order = [e.what for e in calls]
    said = "your steps did not move the parameters"
    if "optimizer.step" not in order:
        return f"{said}: optimizer.step() was never called on the optimizer you were given"
    step_at = order.index("optimizer.step")
    taken = calls[step_at]
    backward = "backward" in order[:step_at]
    if math.isnan(taken.norm):
        if not backward:
            return f"{said}: no backward() reached the parameters before optimizer.step()"
        return (
            f"{said}: backward() ran, but when optimizer.step() ran every .grad was None "
            "again: a call between them removed the gradients"
        )
    if taken.norm == 0:
        handed = [e.norm for e in calls[:step_at] if e.what == "clip" and e.norm > 0]
        return f"{said}: every gradient was exactly 0 when optimizer.step() ran" + (
            f", though backward() had left them a norm of {handed[0]:.3g}: a call between "
            "backward() and step() zeroed them"
            if handed and backward
            else ""
        )
    return f"{said}, though optimizer.step() saw gradients: compare your step with Exercise 2"


def unclipped(events: list, max_norm: float) -> str:
    """Why the parameters equal an unclipped step, from the order of what the first step
    called: a clip after optimizer.step(), before backward(), handed no gradient, or handed
    the gradient without shortening it."""
    calls = [e for e in _events(events) if e.step == 0]
    order = [e.what for e in calls]
    said = "parameters equal an UNCLIPPED step"
    if "optimizer.step" not in order:
        return f"{said}: compare your step with Exercise 2"
    step_at = order.index("optimizer.step")
    used = calls[step_at].norm
    clips = [i for i, what in enumerate(order) if what == "clip"]
    if not clips:
        return (
            f"{said}: optimizer.step() used a gradient of norm {used:.3g}, above max_norm "
            f"{max_norm:g}, and nothing shortened it before step()"
        )
    first_backward = order.index("backward") if "backward" in order else len(order)
    if all(i > step_at for i in clips):
        return (
            f"{said}: your clip_grad_norm_ ran after optimizer.step(), which had already used "
            f"the unclipped gradient (norm {used:.3g}); the clipped one was never used"
        )
    if all(i < first_backward for i in clips):
        return (
            f"{said}: your clip_grad_norm_ ran before backward(), when there was no gradient "
            f"to clip yet; optimizer.step() then used norm {used:.3g}"
        )
    between = [calls[i] for i in clips if first_backward < i < step_at]
    if between and all(math.isnan(e.norm) for e in between):
        return (
            f"{said}: your clip_grad_norm_ was handed no parameter with a gradient (an empty "
            "list, or a generator already used up)"
        )
    if between:
        return (
            f"{said}: your clip_grad_norm_ ran between backward() and step() and was handed a "
            f"norm of {between[-1].norm:.3g}, yet optimizer.step() used {used:.3g}, above "
            f"max_norm {max_norm:g}: it did not shorten the gradient to max_norm"
        )
    return f"{said} (optimizer.step() used norm {used:.3g}): compare your order with Exercise 2"


def diagnose_norm(got: float, model: nn.Module, norm_type: float) -> str:
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    per_tensor = [float(torch.linalg.vector_norm(g, norm_type)) for g in grads]
    two = float(torch.linalg.vector_norm(torch.cat([g.flatten() for g in grads]), 2.0))
    if got == 0.0:
        return "you returned 0: was `parameters` (a generator) used up by a first loop?"
    if math.isclose(got, sum(per_tensor), rel_tol=1e-4):
        return (
            "that is the SUM of the per-tensor norms; the total is the norm of the vector of norms"
        )
    signed_max = max(float(g.max()) for g in grads)
    if math.isinf(norm_type) and math.isclose(got, signed_max, rel_tol=1e-4):
        return "that is the largest entry; the inf-norm is the largest |entry|: take abs() first"
    outer_two = float(torch.linalg.vector_norm(torch.tensor(per_tensor), 2.0))
    if norm_type != 2 and math.isclose(got, outer_two, rel_tol=1e-4):
        return (
            f"that is the 2-norm of the per-tensor {norm_type:g}-norms: combine them with the "
            f"same norm_type ({norm_type:g})"
        )
    if math.isinf(norm_type) and math.isclose(got, two, rel_tol=1e-4):
        return "that is the 2-norm; for norm_type=inf the total is the largest |gradient| entry"
    if math.isclose(got, two, rel_tol=1e-4):
        return "that is the 2-norm: use norm_type for every tensor and for the norm of norms"
    return "it matches no usual mistake: print the per-tensor norms and compare"


def _sorted_as_given(h: list[float]) -> float:
    """statistics.median of the raw history: Python sorts a list holding NaN into runs, not
    in order, so its middle entry can be anything."""
    return statistics.median(h)


def which_statistic(answers: list[float | None], histories: list[list[float]]) -> str:
    """A statistic is named only when it reproduces the learner's answer on every history."""
    if len({a for a in answers}) == 1:
        return " (the same number for every history: the threshold must come from the norms)"
    finite = [[n for n in h if math.isfinite(n)] for h in histories]
    candidates = {
        "the mean of the finite norms": lambda h, f: sum(f) / len(f),
        "the largest finite norm": lambda h, f: max(f),
        "the smallest norm": lambda h, f: min(f),
        "the first norm": lambda h, f: f[0],
        "the last finite norm": lambda h, f: f[-1],
        "the middle entry of the history in the order logged (not sorted)": lambda h, f: h[
            len(h) // 2
        ],
        "the middle finite entry in the order logged (not sorted)": lambda h, f: f[len(f) // 2],
        "the middle of the history sorted with inf/NaN left in (a list holding NaN does not "
        "sort)": lambda h, f: _sorted_as_given(h),
    }
    for what, stat in candidates.items():
        if all(
            a is not None and _close(a, stat(h, f))
            for a, h, f in zip(answers, histories, finite, strict=True)
        ):
            return f" (your answers equal {what} of each history)"
    return ""


def _close(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-6)
