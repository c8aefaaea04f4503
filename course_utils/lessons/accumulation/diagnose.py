"""Lesson 07, exercise 2: what the check measures to name why a layout is wrong.

Each probe (probes.py runs them beside the learner's code) tells causes apart that give the
same symptom, and a message names a cause only where its probe confirmed it:
- wrong gradients: no gradient at all (the reentrant cut-off), dropout switched off in the
  step (gradients equal the plain model's in eval mode), or new dropout masks in the rebuild
  (gradients equal the plain model's only when dropout is off);
- over the memory budget: what the forward kept (saved-tensor hooks);
- more recomputation than the cheapest layout: which Linear layers backward runs again, in
  which pieces, and whether the graph holds reentrant checkpoints (`Rebuild`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from .demo import rel_error

# --- gradients ----------------------------------------------------------------------------


def step_grads(forward: Callable, blocks: nn.Sequential, x, train: bool) -> dict:
    """Parameter gradients of one step (None where autograd gave none), same dropout seed."""
    blocks.train(train)
    blocks.zero_grad(set_to_none=True)
    torch.manual_seed(7)
    out = forward(blocks, x)
    if out.requires_grad:  # a whole-model reentrant checkpoint returns a graph-less output
        out.square().mean().backward()
    return {n: None if p.grad is None else p.grad.clone() for n, p in blocks.named_parameters()}


def grad_mismatch(got: dict, want: dict, tol: float) -> tuple[str, float]:
    """('' or what is wrong, worst relative error) between two steps' parameter grads."""
    missing = sorted({int(n.split(".")[0]) for n, g in got.items() if g is None})
    blocks = 1 + max(int(n.split(".")[0]) for n in got)
    if missing:
        which = f"all {blocks} blocks" if len(missing) == blocks else f"block(s) {missing}"
        why = (
            f"{which} got no gradient: with use_reentrant=True (the default when it is omitted) "
            "and an input that does not require grad, a checkpointed segment is cut off from "
            "autograd; pass use_reentrant=False (or the forward ran under no_grad)"
        )
        return why, 1.0
    worst = max(rel_error(got[n], w) for n, w in want.items())
    return ("" if worst <= tol else "gradients differ"), worst


# --- memory -------------------------------------------------------------------------------


def memory_cause(saved: float, peak_ratio: float) -> str:
    """What the forward kept, measured (saved-tensor hooks: `saved`, the bytes it saved / the
    plain forward's), tells the causes apart: nothing checkpointed keeps everything; one
    checkpoint around everything keeps almost nothing but rebuilds it all at once in backward;
    otherwise too little of the stack is checkpointed, or too much of it is rebuilt at once."""
    measured = f"your forward kept {saved:.2f}x the plain forward's saved bytes"
    if saved >= 0.9:
        return (
            f"{measured}: nothing was checkpointed (checkpoint_sequential's last segment never is)"
        )
    if saved <= 0.1:
        return (
            f"{measured} but the peak is {peak_ratio:.2f}x: the checkpointed part is rebuilt at "
            "once in backward, which holds it all again"
        )
    return (
        f"{measured} and peaks at {peak_ratio:.2f}x: too much is kept, or rebuilt at once in "
        "backward; reread 'Activation checkpointing' and measure the peak of other layouts"
    )


# --- recomputation ------------------------------------------------------------------------

Layer = tuple[int, int]  # (block index, Linear index within the block)


@dataclass(frozen=True)
class Rebuild:
    """How one training step rebuilds in backward: the Linear layers each rebuild ran, in
    order, and the reentrant checkpoints (CheckpointFunctionBackward nodes) in the graph."""

    pieces: tuple[tuple[Layer, ...], ...]
    reentrant: int

    @property
    def blocks(self) -> int:
        """Blocks with a Linear layer run again: the blocks the layout checkpoints."""
        return len({b for piece in self.pieces for b, _ in piece})

    @property
    def widest(self) -> int:
        """The most blocks one rebuild runs: more than 1 when a checkpoint spans blocks."""
        return max((len({b for b, _ in piece}) for piece in self.pieces), default=0)

    @property
    def both_layers(self) -> int:
        """Blocks whose second Linear is run again too (non-reentrant early stop spares it
        in a one-block checkpoint: backward needs only its input, rebuilt by the first)."""
        return sum(j > 0 for piece in self.pieces for _, j in piece)


def _split(calls: list[Layer]) -> tuple[tuple[Layer, ...], ...]:
    """Cut backward's Linear calls into rebuilds: a rebuild runs its layers in forward order,
    and backward rebuilds later segments first, so a new rebuild starts where the order
    does not increase."""
    pieces: list[list[Layer]] = []
    for call in calls:
        if pieces and call > pieces[-1][-1]:
            pieces[-1].append(call)
        else:
            pieces.append([call])
    return tuple(tuple(p) for p in pieces)


def _reentrant_nodes(out: torch.Tensor) -> int:
    """CheckpointFunctionBackward nodes in `out`'s autograd graph (use_reentrant=True)."""
    seen, stack, count = set(), [out.grad_fn], 0
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        count += type(node).__name__ == "CheckpointFunctionBackward"
        stack.extend(fn for fn, _ in node.next_functions)
    return count


def rebuild(forward: Callable, blocks: nn.Sequential, x) -> Rebuild:
    """One training step of `forward(blocks, x)` (train mode), with a forward hook on every
    Linear that records the calls made during backward: the recomputation, layer by layer."""
    names = {
        m: (i, j)
        for i, block in enumerate(blocks)
        for j, m in enumerate(m for m in block.modules() if isinstance(m, nn.Linear))
    }
    calls: list[Layer] = []
    in_backward = [False]

    def record(module: nn.Module, *_) -> None:
        if in_backward[0]:
            calls.append(names[module])

    hooks = [m.register_forward_hook(record) for m in names]
    try:
        blocks.train()
        blocks.zero_grad(set_to_none=True)
        out = forward(blocks, x)
        reentrant = _reentrant_nodes(out)
        in_backward[0] = True
        if out.requires_grad:
            out.square().mean().backward()
    finally:
        for h in hooks:
            h.remove()
    return Rebuild(_split(calls), reentrant)


def rebuild_cause(got: Rebuild, fewest: int) -> str:
    """Why a layout re-runs more Linear layers than the first `fewest` blocks one by one
    (one each), from what `rebuild` measured; where no probe tells, what was measured."""
    causes = []
    if got.reentrant:
        causes.append(
            f"your {got.reentrant} checkpoints use use_reentrant=True, which rebuilds each "
            "checkpointed piece to its end; use_reentrant=False stops once backward has what "
            "it needs (early stop)"
        )
    if got.blocks > fewest:
        causes.append(
            f"your layout checkpoints more than the budget needs ({got.blocks} blocks where "
            f"{fewest} fit), and every checkpointed block is paid again in backward"
        )
    if not got.reentrant and got.widest > 1:
        causes.append(
            f"your checkpoints span up to {got.widest} blocks, and a rebuild runs every block "
            "of its span but the last to the end; checkpoint one block per call"
        )
    if not causes:
        causes.append(f"the cheapest layout re-runs one Linear layer in each of {fewest} blocks")
    both = f", re-running both Linear layers in {got.both_layers} of them" * bool(got.both_layers)
    measured = f"backward rebuilds {got.blocks} blocks in {len(got.pieces)} rebuilds{both}"
    return f"{measured}: " + "; ".join(causes)
