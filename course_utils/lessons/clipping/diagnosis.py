"""Why an answer of lesson 08 is wrong, decided on the check's side (the judge, under `course
grade`): wrong steps the checks replay to confirm a cause before naming it (a message says
"you clipped each tensor on its own" only when a step that does exactly that ends with the
learner's parameters), the usual ways a total norm goes wrong, and the statistic a threshold
rule follows. Nothing here runs the learner's code: the probes (probes.py) do."""

from __future__ import annotations

import math

import torch
from torch import nn

from . import demo


def _backward(model, loss_fn, x, y, optimizer) -> list[torch.Tensor]:
    optimizer.zero_grad(set_to_none=True)
    loss_fn(model(x), y).backward()
    return [p for p in model.parameters() if p.grad is not None]


def _total(params, norm_type: float = 2.0) -> torch.Tensor:
    norms = [torch.linalg.vector_norm(p.grad.detach(), norm_type) for p in params]
    return torch.linalg.vector_norm(torch.stack(norms), norm_type)


def per_tensor(model, loss_fn, x, y, optimizer, max_norm):
    params = _backward(model, loss_fn, x, y, optimizer)
    norm = _total(params)
    for p in params:
        nn.utils.clip_grad_norm_([p], max_norm)
    optimizer.step()
    return norm


def inf_norm(model, loss_fn, x, y, optimizer, max_norm):
    params = _backward(model, loss_fn, x, y, optimizer)
    norm = _total(params)
    nn.utils.clip_grad_norm_(params, max_norm, norm_type=math.inf)
    optimizer.step()
    return norm


def first_group(model, loss_fn, x, y, optimizer, max_norm):
    params = _backward(model, loss_fn, x, y, optimizer)
    norm = _total(params)
    nn.utils.clip_grad_norm_(optimizer.param_groups[0]["params"], max_norm)
    optimizer.step()
    return norm


def no_zero_grad(model, loss_fn, x, y, optimizer, max_norm):
    loss_fn(model(x), y).backward()
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return norm


def always_rescaled(model, loss_fn, x, y, optimizer, max_norm):
    params = _backward(model, loss_fn, x, y, optimizer)
    norm = _total(params)
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


def which_statistic(answers: list[float | None], histories: list[list[float]]) -> str:
    """A statistic is named only when it reproduces the learner's answer on every history."""
    if len({a for a in answers}) == 1:
        return " (the same number for every history: the threshold must come from the norms)"
    finite = [[n for n in h if math.isfinite(n)] for h in histories]
    candidates = {
        "the mean of the finite norms": lambda f: sum(f) / len(f),
        "the largest finite norm": max,
        "the smallest norm": min,
        "the first norm": lambda f: f[0],
        "the last finite norm": lambda f: f[-1],
    }
    for what, stat in candidates.items():
        if all(
            a is not None and math.isclose(a, stat(f), rel_tol=1e-6)
            for a, f in zip(answers, finite, strict=True)
        ):
            return f" (your answers equal {what} of each history)"
    return ""
