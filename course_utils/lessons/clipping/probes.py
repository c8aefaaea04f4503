"""Lesson 08's probes: each runs the learner's answer on a specimen it builds from plain
arguments, beside the learner's code, and returns what it saw as data (course_utils.probes).
The checks (checks.py) compute what that data must equal on their own side; diagnosis.py
names a mistake from it. The specimens are built here, so both sides build the same ones."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import math
from collections import deque
from unittest import mock

import torch
from torch import nn

from ...amp_calls import CallLog, Event, watch
from ...probes import probe
from . import accumulation, demo

# --- specimens both sides build --------------------------------------------------------------


def norm_case(seed: int, scale_exp: int) -> nn.Module:
    """Two trained layers, one frozen (grad None) and one unused this step (grad None), the
    loss scaled by 10**scale_exp (norms from ~10 to ~1e3)."""
    torch.manual_seed(seed)
    model = nn.ModuleDict(
        {
            "a": nn.Linear(8, 16),
            "b": nn.Linear(16, 4),
            "frozen": nn.Linear(4, 4),
            "unused": nn.Linear(3, 3),
        }
    )
    model["frozen"].requires_grad_(False)
    x = torch.randn(32, 8)
    (model["frozen"](model["b"](model["a"](x).relu())) ** 2).sum().mul(10.0**scale_exp).backward()
    return model


def step_case(seed: int, batch_seed: int) -> tuple[nn.Module, list]:
    """The exploding RNN and the two batches a clipped step is compared on."""
    model, gen = demo.make_rnn(seed), demo.rnn_batches(batch_seed)
    return model, [next(gen), next(gen)]


def two_steps(
    step, model, batches, max_norm: float, log: CallLog | None = None
) -> tuple[list[torch.Tensor], object]:
    """Two steps with an optimizer of two param groups (recurrent weights, the rest), so that
    clipping only the first group shows; the parameters after, and the last norm returned.
    With a `log`, what each step called is recorded into it (amp_calls.watch: each
    clip_grad_norm_ with the norm it was handed, each optimizer.step() with its gradients'
    norm), and each backward() as a "backward" event."""
    model = copy.deepcopy(model)
    params = list(model.parameters())
    optimizer = torch.optim.SGD([{"params": params[:2]}, {"params": params[2:]}], lr=demo.LR)
    norm = None
    with contextlib.ExitStack() as stack:
        if log is not None:
            stack.enter_context(watch(optimizer, log))
            stack.enter_context(_backwards(params, log))
        for i, (x, y) in enumerate(batches):
            if log is not None:
                log.step = i
            norm = step(model, nn.functional.mse_loss, x, y, optimizer, max_norm)
    return [p.detach().clone() for p in model.parameters()], norm


@contextlib.contextmanager
def _backwards(params: list[nn.Parameter], log: CallLog):
    """A "backward" event in `log` each time a backward pass reaches the parameters (once per
    pass: the first parameter's gradient accumulated after another event opens it)."""

    def seen(_):
        if not log.events or log.events[-1].what != "backward" or log.events[-1].step != log.step:
            log.events.append(Event(log.step, "backward"))

    hooks = [p.register_post_accumulate_grad_hook(seen) for p in params]
    try:
        yield
    finally:
        for hook in hooks:
            hook.remove()


@contextlib.contextmanager
def _no_delegation():
    """The exercise is to compute the norm: the library's own norm functions are off limits."""

    def refuse(*args, **kwargs):
        raise RuntimeError(
            "compute the norm yourself: clip_grad_norm_/get_total_norm are off limits here"
        )

    names = ["clip_grad_norm_", "clip_grad_norm", "get_total_norm"]
    with contextlib.ExitStack() as stack:
        for module in (nn.utils, nn.utils.clip_grad):
            for name in names:
                if hasattr(module, name):
                    stack.enter_context(mock.patch.object(module, name, refuse))
        yield


# --- the probes ----------------------------------------------------------------------------


@probe
def total_norm_of(
    total_grad_norm, seed: int, scale_exp: int, norm_type: float, as_list: bool = False
) -> dict:
    """The learner's norm of norm_case(seed, scale_exp)'s gradients, given model.parameters()
    (a generator) or a list of them, with clip_grad_norm_ refused; and the gradients as the
    call left them (it must only measure)."""
    model = norm_case(seed, scale_exp)
    params = list(model.parameters())
    with _no_delegation():
        got = total_grad_norm(list(params) if as_list else model.parameters(), norm_type)
    return {"norm": got, "grads": [p.grad for p in params if p.grad is not None]}


@probe
def clipped_steps(clipped_step, seed: int, batch_seed: int, max_norm: float) -> dict:
    """Two of the learner's steps on step_case(seed, batch_seed): the parameters after, the
    norm the second one returned, and what each step called, in order (two_steps' log)."""
    model, batches = step_case(seed, batch_seed)
    log = CallLog()
    params, norm = two_steps(clipped_step, model, batches, max_norm, log)
    return {"params": params, "norm": norm, "events": [dataclasses.asdict(e) for e in log.events]}


@probe
def rnn_run(clipped_step, max_norm: float, steps: int, seed: int, tail: int) -> dict:
    """demo.train_rnn with the learner's step: how many losses it logged, and the weights
    each of the last `tail` logged steps started from (the check computes their losses)."""
    starts: deque = deque(maxlen=tail)

    def step(model, *args):
        starts.append([p.detach().clone() for p in model.parameters()])
        return clipped_step(model, *args)

    log = demo.train_rnn(step, max_norm, steps=steps, seed=seed, label="yours")
    return {"logged": len(log.loss), "starts": list(starts)}


def rnn_losses(starts: list[list[torch.Tensor]], logged: int, seed: int) -> tuple[float, float]:
    """(the start loss, the mean loss of the last logged steps) of a train_rnn run of `seed`
    that logged `logged` losses, each computed here, as train_rnn logs it, from the weights
    that step started from (`starts`, the last ones); inf where one is not finite."""
    model, batches = demo.make_rnn(seed), demo.rnn_batches(seed + 1)
    first, losses, start = logged - len(starts), [], math.nan
    torch.set_flush_denormal(True)  # as train_rnn: a saturating RNN computes with denormals
    try:
        with torch.no_grad():
            for i in range(logged):
                x, y = next(batches)
                if i == 0:
                    start = float(nn.functional.mse_loss(model(x), y))
                if i >= first:
                    for p, w in zip(model.parameters(), starts[i - first], strict=True):
                        p.copy_(w)
                    losses.append(float(nn.functional.mse_loss(model(x), y)))
    finally:
        torch.set_flush_denormal(False)
    final = sum(losses) / len(losses) if losses and all(map(math.isfinite, losses)) else math.inf
    return start, final


@probe
def max_norm_for(choose_max_norm, norms: list[float]):
    """The learner's threshold for one norm history (a list of floats, inf and NaN included)."""
    return choose_max_norm(list(norms))


@probe
def accumulated_steps(
    accumulated_clipped_step, seed: int, batch_seed: int, k: int, max_norm: float
) -> dict:
    """Two of the learner's accumulated steps on accumulation.accum_case(seed, batch_seed, k):
    the parameters after, the norm each returned, and the most samples one forward saw."""
    model, batches = accumulation.accum_case(seed, batch_seed, k)
    return accumulation.run_steps(accumulated_clipped_step, model, batches, max_norm)
