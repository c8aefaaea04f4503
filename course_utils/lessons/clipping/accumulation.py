"""Exercise 4's specimens: the exploding RNN's batches cut into micro-batches, and a runner
that takes optimizer steps with an accumulated, clipped step. Both sides of 08-accum-clip
build the same ones from plain arguments (a seed, a number of micro-batches), so the probe
and the check agree on what was stepped.

An accumulated step must equal one clipped step on all its micro-batches at once: with a mean
loss over equal micro-batches, dividing each micro-batch's loss by their number and calling
`backward()` on each adds up the whole batch's gradient (lesson 07; PyTorch's AMP examples,
"Gradient accumulation": clip "at the end", once the gradients of the step are complete,
https://docs.pytorch.org/docs/stable/notes/amp_examples.html#gradient-accumulation).
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import torch
from torch import nn

from ...host_reads import HostReads
from . import demo

# step(model, loss_fn, micro_batches, optimizer, max_norm) -> the norm before clipping
AccumStep = Callable[..., object]


def split(x: torch.Tensor, y: torch.Tensor, k: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """A batch cut into `k` equal micro-batches, in order."""
    return list(zip(x.chunk(k), y.chunk(k), strict=True))


def second_k(k: int) -> int:
    """The second step's number of micro-batches: another than the first's, so that a count
    typed into the step (lesson 07's 4) is wrong in one of the two."""
    return k // 2 if k > 2 else 2 * k


def accum_case(seed: int, batch_seed: int, k: int, steps: int = 2) -> tuple[nn.Module, list]:
    """The exploding RNN of `seed` and `steps` batches of 64 (of `batch_seed`), cut into `k`
    micro-batches of 64 / k, then second_k(k), in turn."""
    model, gen = demo.make_rnn(seed), demo.rnn_batches(batch_seed)
    return model, [split(*next(gen), second_k(k) if i % 2 else k) for i in range(steps)]


def run_steps(step: AccumStep, model: nn.Module, batches: list, max_norm: float) -> dict:
    """One call of `step` per batch of micro-batches, on a copy of `model`, with SGD over two
    param groups (the recurrent weights, the rest: clipping only the first group shows). The
    parameters after, each norm returned, the most samples one forward saw, and how many values
    the steps read on the host (each a host-device sync on a GPU)."""
    model = copy.deepcopy(model)
    params = list(model.parameters())
    optimizer = torch.optim.SGD([{"params": params[:2]}, {"params": params[2:]}], lr=demo.LR)
    widest = [0]

    def seen(module, args, out):
        widest[0] = max(widest[0], int(args[0].shape[0]))

    hook = model.register_forward_hook(seen)
    try:
        with HostReads() as reads:
            norms = [
                step(model, nn.functional.mse_loss, micro, optimizer, max_norm) for micro in batches
            ]
    finally:
        hook.remove()
    return {
        "params": [p.detach().clone() for p in model.parameters()],
        "norms": norms,
        "widest": widest[0],
        "host_reads": reads.count,
    }


def _whole_batch_step(model, loss_fn, micro_batches, optimizer, max_norm) -> torch.Tensor:
    """What an accumulated clipped step must equal: one clipped step on all the micro-batches
    at once (exercise 2's step on the whole batch; the grading kernel withholds it)."""
    x = torch.cat([mx for mx, _ in micro_batches])
    y = torch.cat([my for _, my in micro_batches])
    optimizer.zero_grad(set_to_none=True)
    loss_fn(model(x), y).backward()
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return norm


def whole_batch(model: nn.Module, batches: list, max_norm: float) -> dict:
    """run_steps of the whole-batch clipped step: what the learner's steps must end at."""
    return run_steps(_whole_batch_step, model, batches, max_norm)


def largest_difference(a: list, b: list) -> float:
    """The largest |difference| between two lists of parameters (inf if they do not pair)."""
    if len(a) != len(b) or not all(
        isinstance(p, torch.Tensor) and p.shape == q.shape for p, q in zip(a, b, strict=True)
    ):
        return float("inf")
    return max(float((p - q).abs().max()) for p, q in zip(a, b, strict=True))


def same(a: list, b: list, atol: float = 1e-4) -> bool:
    """Equal up to float32 rounding: a mean of micro-batch gradients and the whole batch's
    gradient add up in another order, and two steps of the exploding RNN amplify it (up to
    2.5e-6 here; checks.THRESHOLDS["accum_atol"] has the evidence, and is what the check
    passes)."""
    return largest_difference(a, b) <= atol
