"""Lesson 07's probes: each runs the learner's answer on a specimen it builds from plain
arguments, beside the learner's code, and returns what it saw as data (course_utils.probes).
The checks (checks.py) compute what the data must equal themselves; the specimens are built
here by the same functions on both sides.

Readings taken here, beside the learner's code, that a verdict rests on: the gradient each
`optimizer.step()` sees (a step pre-hook), a step's peak tensor bytes and Linear calls, the
bytes a forward saves and how backward rebuilds (hooks), the samples/s of each micro-batch
configuration the learner's plan chose from. The checks' `in_kernel` says which.
"""

from __future__ import annotations

import torch
from torch import nn

from ...device import get_device
from ...measure import steady_cpu
from ...memory import activation_bytes, tensor_peak_bytes
from ...probes import probe
from .demo import learner_trajectory, linear_calls, make_accum_problem, make_blocks, train_step
from .diagnose import Rebuild, rebuild, step_grads
from .planning import EFFECTIVE_BATCH, MadeUpProbe, Probe

# --- exercise 1: an accumulated epoch ---------------------------------------------------------


@probe
def accumulated_grads(accumulate_epoch, n_micro: int, micro: int, k: int, seed: int) -> list:
    """The gradient each optimizer.step() of the learner's epoch saw (demo.learner_trajectory),
    on make_accum_problem(n_micro, micro, k, seed=seed)."""
    problem = make_accum_problem(n_micro, micro, k, seed=seed)
    return learner_trajectory(accumulate_epoch, problem).grads


# --- exercise 2: a checkpointed forward -------------------------------------------------------

STACK = {"depth": 16, "width": 32, "batch": 512, "dropout": 0.1}  # the check's 16-block stack


def stack_spec(seed: int) -> dict:
    """The checked stack and its input, as data: both sides build it with `build_stack`."""
    return {**STACK, "seed": seed}


def build_stack(spec: dict) -> tuple[nn.Sequential, torch.Tensor]:
    """(blocks, x) of a stack_spec, on the course's device: weights and input from its seed."""
    blocks = make_blocks(spec["depth"], spec["width"], spec["dropout"], seed=spec["seed"])
    generator = torch.Generator().manual_seed(spec["seed"] + 1000)
    x = torch.randn(spec["batch"], spec["width"], generator=generator).to(get_device())
    return blocks, x


_STACK: dict = {}  # the kernel's specimen, built by the first probe of a check run and reused:
# a timed probe must not time building it


def _stack(spec: dict, fresh: bool = False) -> tuple[nn.Sequential, torch.Tensor]:
    key = tuple(sorted(spec.items()))
    if fresh or key not in _STACK:
        _STACK.clear()
        _STACK[key] = build_stack(spec)
    return _STACK[key]


@probe
def checkpointed_output(checkpointed_forward, spec: dict) -> torch.Tensor:
    """The learner's forward in eval mode, without autograd, on a fresh stack (the first probe
    of a check run)."""
    print("measuring your layout's gradients, peak memory and recomputation ...")  # 5-15 s
    blocks, x = _stack(spec, fresh=True)
    with torch.no_grad():
        blocks.eval()
        return checkpointed_forward(blocks, x)


@probe
def checkpointed_grads(checkpointed_forward, spec: dict, train: bool) -> dict:
    """Parameter gradients of one step of the learner's forward (None where autograd gave
    none), dropout seeded as the check's own step is (diagnose.step_grads)."""
    blocks, x = _stack(spec)
    with steady_cpu():  # one thread: many times faster than two on a shared 2-core CPU
        return step_grads(checkpointed_forward, blocks, x, train)


@probe
def dropout_left_off(checkpointed_forward, spec: dict) -> int:
    """How many Dropout layers a forward called in train mode leaves in eval mode (a forward
    that calls blocks.eval() to keep dropout out of the rebuild trains without dropout)."""
    blocks, x = _stack(spec)
    blocks.train()
    with torch.no_grad():
        checkpointed_forward(blocks, x)
    return sum(not m.training for m in blocks.modules() if isinstance(m, nn.Dropout))


@probe
def step_readings(checkpointed_forward, spec: dict) -> dict:
    """One training step of the learner's forward (train mode): the peak bytes of live tensors
    over forward and backward, and the Linear layers it ran (recomputation included)."""
    blocks, x = _stack(spec)
    blocks.train()
    step = train_step(checkpointed_forward, blocks, x)
    with steady_cpu():  # one thread: the same bytes, and steadier on a shared CPU
        return {"peak_bytes": tensor_peak_bytes(step), "linear_calls": linear_calls(blocks, step)}


@probe
def saved_bytes(checkpointed_forward, spec: dict) -> int:
    """Bytes the learner's forward saves for backward (saved-tensor hooks), in train mode."""
    blocks, x = _stack(spec)
    blocks.train()
    return activation_bytes(lambda: checkpointed_forward(blocks, x))


@probe
def rebuild_layout(checkpointed_forward, spec: dict) -> dict:
    """How one training step of the learner's forward rebuilds in backward (diagnose.rebuild)."""
    blocks, x = _stack(spec)
    found = rebuild(checkpointed_forward, blocks, x)
    return {
        "pieces": [list(map(list, piece)) for piece in found.pieces],
        "reentrant": found.reentrant,
    }


def as_rebuild(data: dict) -> Rebuild:
    """A Rebuild from what rebuild_layout returned."""
    pieces = tuple(tuple((int(b), int(j)) for b, j in piece) for piece in data["pieces"])
    return Rebuild(pieces, int(data["reentrant"]))


def step_digest(blocks: nn.Sequential, loss: torch.Tensor) -> dict:
    """What a timed step computed, small enough to send each call: its loss and the norm of
    the parameter gradients."""
    grads = [p.grad.reshape(-1) for p in blocks.parameters() if p.grad is not None]
    norm = torch.cat(grads).norm().item() if grads else float("nan")
    return {"loss": loss.item(), "grad_norm": norm}


def seeded_step(forward, blocks: nn.Sequential, x: torch.Tensor) -> dict:
    """One training step, dropout seeded as in diagnose.step_grads, and its digest."""
    blocks.zero_grad(set_to_none=True)
    torch.manual_seed(7)
    loss = forward(blocks, x).square().mean()
    loss.backward()
    return step_digest(blocks, loss)


@probe
def timed_step(checkpointed_forward, spec: dict) -> dict:
    """One training step of the learner's forward on the kernel's stack (built by an earlier
    probe, so the judge's clock around this call times the step): its digest, the work done."""
    blocks, x = _stack(spec)
    blocks.train()
    with steady_cpu():
        return seeded_step(checkpointed_forward, blocks, x)


# --- exercise 3: a plan for a memory budget ---------------------------------------------------


def divisors(n: int) -> list[int]:
    return [m for m in range(1, n + 1) if n % m == 0]


@probe
def probe_readings(stand_in, configurations: list) -> list:
    """[micro_batch, checkpoint, peak_bytes, samples_per_s] of each configuration, measured by
    a stand-in probe a test passed to the check."""
    return [_reading(stand_in(int(m), bool(c))) for m, c in configurations]


def _reading(measured) -> list:
    return [measured.micro_batch, measured.checkpoint, measured.peak_bytes, measured.samples_per_s]


@probe
def plans_chosen(plan, stand_in, budgets: list, made_up_budgets: list, width: int) -> dict:
    """The learner's plan for each budget (bytes) of the effective batch, asked with one
    measuring probe (a fresh `Probe(width=width)`, or a test's stand-in), then every
    configuration that probe measured, all divisors with and without checkpointing: the
    samples/s the plan chose from. And its plan for each budget of the made-up probe."""
    probe_ = stand_in if stand_in is not None else Probe(width=width)
    chosen = [plan(EFFECTIVE_BATCH, int(b), probe_) for b in budgets]
    measured = [_reading(probe_(m, c)) for m in divisors(EFFECTIVE_BATCH) for c in (False, True)]
    made_up = MadeUpProbe()
    others = [plan(MadeUpProbe.EFFECTIVE, int(b), made_up) for b in made_up_budgets]
    return {"chosen": chosen, "measured": measured, "made_up": others}
