"""Lesson 07's workloads: an accumulation problem in float64, the BatchNorm caveat, a stack
of transformer-style MLP blocks for checkpointing, and the memory/throughput probe.

Accumulation is checked in float64 so that "equal to a full-batch step" means equal to
rounding (about 1e-15), and any real mistake (a factor k, a missing micro-batch) stands out
by many orders of magnitude.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint, checkpoint_sequential

from ...device import get_device
from ...measure import compare, steady_cpu
from ...memory import activation_bytes, tensor_peak_bytes
from ...progress import tqdm


def guide_accumulate_epoch(model, optimizer, loader, loss_fn, accum_steps):
    """The guide's accumulation loop (its tip 9), in exercise 1's names: `training_set` is
    `loader`, `loss_function` is `loss_fn`, `accumulation_steps` is `accum_steps`."""
    model.zero_grad()  # Reset gradients tensors
    for i, (inputs, labels) in enumerate(loader):
        predictions = model(inputs)  # Forward pass
        loss = loss_fn(predictions, labels)  # Compute loss function
        loss = loss / accum_steps  # Normalize our loss (if averaged)
        loss.backward()  # Backward pass
        if (i + 1) % accum_steps == 0:  # Wait for several backward steps
            optimizer.step()  # Now we can do an optimizer step
            model.zero_grad()  # Reset gradients tensors


# --- accumulation ---------------------------------------------------------------------------


@dataclass
class AccumProblem:
    """A float64 model and its data cut into equal micro-batches, stepped every `k`."""

    make_model: Callable[[], nn.Module]
    micro_batches: list[tuple[torch.Tensor, torch.Tensor]]
    k: int
    lr: float = 0.5

    @property
    def groups(self) -> list[list[tuple[torch.Tensor, torch.Tensor]]]:
        mb = self.micro_batches
        return [mb[i : i + self.k] for i in range(0, len(mb), self.k)]


def make_accum_problem(
    n_micro: int = 7, micro: int = 4, k: int = 3, *, norm: str = "none", seed: int = 0
) -> AccumProblem:
    """`n_micro` micro-batches of `micro` samples; with n_micro % k != 0 the last group is
    partial. `norm`: "none", "batch" (BatchNorm1d) or "layer" (LayerNorm) after layer 1."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n_micro * micro, 8, generator=gen, dtype=torch.float64)
    y = torch.randint(0, 3, (n_micro * micro,), generator=gen)

    def make_model() -> nn.Module:
        torch.manual_seed(seed)
        norms = {"none": nn.Identity(), "batch": nn.BatchNorm1d(16), "layer": nn.LayerNorm(16)}
        return nn.Sequential(nn.Linear(8, 16), norms[norm], nn.Tanh(), nn.Linear(16, 3)).double()

    return AccumProblem(make_model, list(zip(x.split(micro), y.split(micro), strict=True)), k)


def flat_grad(model: nn.Module) -> torch.Tensor:
    """All parameter gradients as one vector (zeros where a gradient is missing)."""
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in model.parameters()]
    return torch.cat([g.reshape(-1) for g in grads])


@dataclass
class Trajectory:
    """The gradient seen at each optimizer step, and (for the harness's own full-batch run)
    the gradient of each group's last micro-batch alone, for diagnosis."""

    grads: list[torch.Tensor] = field(default_factory=list)
    last_micro: list[torch.Tensor] = field(default_factory=list)


def full_batch_trajectory(problem: AccumProblem) -> Trajectory:
    """What accumulation must reproduce: one SGD step per group on the whole group at once."""
    model, loss_fn, out = problem.make_model(), nn.CrossEntropyLoss(), Trajectory()
    opt = torch.optim.SGD(model.parameters(), lr=problem.lr)
    for group in problem.groups:
        xs, ys = group[-1]
        loss_fn(model(xs), ys).backward()
        out.last_micro.append(flat_grad(model))
        model.zero_grad(set_to_none=True)
        x, y = torch.cat([g[0] for g in group]), torch.cat([g[1] for g in group])
        loss_fn(model(x), y).backward()
        out.grads.append(flat_grad(model))
        opt.step()
        model.zero_grad(set_to_none=True)
    return out


def learner_trajectory(train_epoch: Callable, problem: AccumProblem) -> Trajectory:
    """Run `train_epoch(model, optimizer, loader, loss_fn, accum_steps)` and record the
    gradient that each `optimizer.step()` call sees (a step pre-hook)."""
    model, out = problem.make_model(), Trajectory()
    params = list(model.parameters())  # two param groups: an answer that zeroes, scales or
    groups = [{"params": params[:1]}, {"params": params[1:]}]  # steps only the first shows
    opt = torch.optim.SGD(groups, lr=problem.lr)
    opt.register_step_pre_hook(lambda *_: out.grads.append(flat_grad(model)))
    train_epoch(model, opt, list(problem.micro_batches), nn.CrossEntropyLoss(), problem.k)
    return out


def rel_error(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / b.norm().clamp_min(1e-300))


def batchnorm_caveat(train_epoch: Callable) -> dict[str, float]:
    """Relative gradient error of an accumulated step against the full-batch step, for the
    same MLP without normalisation, with LayerNorm, and with BatchNorm (whose statistics
    are per micro-batch, so accumulation cannot reproduce the full batch)."""
    errors = {}
    for norm in ("none", "layer", "batch"):
        problem = make_accum_problem(n_micro=4, micro=4, k=4, norm=norm)
        got = learner_trajectory(train_epoch, problem).grads[0]
        errors[norm] = rel_error(got, full_batch_trajectory(problem).grads[0])
    return errors


# --- activation checkpointing ---------------------------------------------------------------


class Block(nn.Module):
    """A pre-norm transformer MLP block, x + W2·dropout(gelu(W1·LN(x))): it saves about nine
    activations of its input's size for backward, so checkpointing it pays."""

    def __init__(self, width: int, dropout: float = 0.1):
        super().__init__()
        self.net = nn.Sequential(
            nn.LayerNorm(width),
            nn.Linear(width, 4 * width),
            nn.GELU(),
            nn.Dropout(dropout),
            nn.Linear(4 * width, width),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.net(x)


def make_blocks(
    depth: int = 16, width: int = 64, dropout: float = 0.1, seed: int = 0
) -> nn.Sequential:
    """`depth` blocks on the course's device (cu.get_device())."""
    torch.manual_seed(seed)
    return nn.Sequential(*[Block(width, dropout) for _ in range(depth)]).to(get_device())


def train_step(forward: Callable, blocks: nn.Sequential, x: torch.Tensor) -> Callable[[], None]:
    """One forward + backward of `forward(blocks, x)` with a mean-square loss."""

    def step() -> None:
        blocks.zero_grad(set_to_none=True)
        forward(blocks, x).square().mean().backward()

    return step


def plain_forward(blocks: nn.Sequential, x: torch.Tensor) -> torch.Tensor:
    return blocks(x)


def segments_forward(segments: int) -> Callable:
    """`checkpoint_sequential` with this many segments (the last one is never checkpointed)."""

    def forward(blocks: nn.Sequential, x: torch.Tensor) -> torch.Tensor:
        return checkpoint_sequential(blocks, segments, x, use_reentrant=False)

    return forward


def linear_calls(blocks: nn.Module, step: Callable[[], None]) -> int:
    """How many times `step()` runs a Linear layer of `blocks` (forward and recomputation):
    a forward hook on every nn.Linear counts its calls."""
    calls = [0]

    def count(*_) -> None:
        calls[0] += 1

    hooks = [m.register_forward_hook(count) for m in blocks.modules() if isinstance(m, nn.Linear)]
    try:
        step()
    finally:
        for h in hooks:
            h.remove()
    return calls[0]


@dataclass
class SweepPoint:
    segments: int  # 0 = no checkpointing
    saved_bytes: int  # saved for backward during the forward (saved-tensor hooks)
    peak_bytes: int  # peak of live tensors over forward + backward
    time_ratio: float  # step time / step time without checkpointing (interleaved median)
    reruns: int = 0  # Linear forwards run again in backward (linear_calls beyond the plain step)


def segment_sweep(
    blocks: nn.Sequential, x: torch.Tensor, segments: list[int], repeats: int = 6
) -> list[SweepPoint]:
    """Memory and time of checkpoint_sequential against the plain step, per segment count."""
    plain = train_step(plain_forward, blocks, x)
    base_calls = linear_calls(blocks, plain)
    points = [
        SweepPoint(
            0, activation_bytes(lambda: plain_forward(blocks, x)), tensor_peak_bytes(plain), 1.0
        )
    ]
    with steady_cpu():
        for n in tqdm(segments, desc="segments", leave=False):
            fwd = segments_forward(n)
            step = train_step(fwd, blocks, x)
            ratio = 1 / compare(plain, step, warmup=1, repeats=repeats).speedup
            saved = activation_bytes(lambda fwd=fwd: fwd(blocks, x))
            reruns = linear_calls(blocks, step) - base_calls
            points.append(SweepPoint(n, saved, tensor_peak_bytes(step), ratio, reruns))
    return points


def plot_sweep(points: list[SweepPoint], depth: int):
    """Peak and saved MiB (left axis) and step-time ratio (right axis) against segments."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.6))
    pts = [p for p in points if p.segments > 0]
    segs = [p.segments for p in pts]
    ax.plot(segs, [p.peak_bytes / 2**20 for p in pts], "o-", label="peak live tensors")
    ax.plot(segs, [p.saved_bytes / 2**20 for p in pts], "s--", label="saved in forward")
    ax.axhline(points[0].peak_bytes / 2**20, color="grey", ls=":", label="no checkpointing")
    ax.axvline(math.sqrt(depth), color="C3", ls="-.", alpha=0.6, label=f"sqrt({depth})")
    ax.set(xlabel="segments (checkpoint_sequential)", ylabel="MiB", xscale="log", ylim=(0, None))
    ax.set_xticks(segs, [str(s) for s in segs], minor=False)
    ax.set_xticks([], minor=True)
    twin = ax.twinx()
    twin.plot(segs, [p.time_ratio for p in pts], "^-", color="C2", label="step time / plain")
    twin.set_ylabel("step time / plain", color="C2")
    twin.set_ylim(0.8, max(1.6, max(p.time_ratio for p in pts) + 0.1))
    handles = ax.get_legend_handles_labels()[0] + twin.get_legend_handles_labels()[0]
    ax.legend(handles=handles, loc="center right", fontsize=8)
    ax.set_title("checkpoint_sequential: memory and time against segments")
    fig.tight_layout()
    return fig


def rng_under_recompute(depth: int = 4, width: int = 32, batch: int = 64) -> dict[str, float]:
    """Relative gradient error against the plain step, with dropout active, when the
    recomputation replays the forward's RNG state (the default) and when it does not."""
    blocks, x = (
        make_blocks(depth, width, dropout=0.5),
        torch.randn(batch, width, device=get_device()),
    )

    def grads(forward) -> torch.Tensor:
        torch.manual_seed(1)
        train_step(forward, blocks, x)()
        return torch.cat([p.grad.reshape(-1) for p in blocks.parameters()])

    plain = grads(plain_forward)
    out = {}
    for preserve in (True, False):

        def fwd(b, h, preserve=preserve):
            for block in b:
                h = checkpoint(block, h, use_reentrant=False, preserve_rng_state=preserve)
            return h

        out[f"preserve_rng_state={preserve}"] = rel_error(grads(fwd), plain)
    return out


def per_block_forward(blocks: nn.Sequential, x: torch.Tensor) -> torch.Tensor:
    """Every block checkpointed: only block inputs are kept; all of the forward is redone."""
    for block in blocks:
        x = checkpoint(block, x, use_reentrant=False)
    return x
