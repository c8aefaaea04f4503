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
from tqdm.auto import tqdm

from ...device import get_device
from ...measure import compare, steady_cpu, time_fn
from ...memory import activation_bytes, cuda_peak_memory, tensor_peak_bytes

# Kuhn's snippet as the Chinese rendering in seeds/003 carries it: `for` where `if` is meant.
GUIDE_SNIPPET = """\
model.zero_grad()
for i, (inputs, labels) in enumerate(training_set):
    predictions = model(inputs)
    loss = loss_function(predictions, labels)
    loss = loss / accumulation_steps
    loss.backward()
    for (i+1) % accumulation_steps == 0:
        optimizer.step()
        model.zero_grad()
"""


def guide_snippet_error() -> str:
    """Compile the guide's snippet and return the SyntaxError Python raises."""
    try:
        compile(GUIDE_SNIPPET, "guide", "exec")
    except SyntaxError as exc:
        return f"SyntaxError: {exc.msg} (line {exc.lineno}: {exc.text.strip()!r})"
    return "compiles"


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


@dataclass
class SweepPoint:
    segments: int  # 0 = no checkpointing
    saved_bytes: int  # saved for backward during the forward (saved-tensor hooks)
    peak_bytes: int  # peak of live tensors over forward + backward
    time_ratio: float  # step time / step time without checkpointing (interleaved median)


def segment_sweep(
    blocks: nn.Sequential, x: torch.Tensor, segments: list[int], repeats: int = 6
) -> list[SweepPoint]:
    """Memory and time of checkpoint_sequential against the plain step, per segment count."""
    plain = train_step(plain_forward, blocks, x)
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
            points.append(SweepPoint(n, saved, tensor_peak_bytes(step), ratio))
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


def time_step(step: Callable[[], None], repeats: int = 5) -> float:
    """Median seconds per step, one thread on a CPU, samples of >= 20 ms to even out load."""
    with steady_cpu():
        return time_fn(step, warmup=1, repeats=repeats, min_sample_s=0.02).median


# --- choosing micro-batch x accumulation x checkpointing --------------------------------------


@dataclass(frozen=True)
class Measured:
    """One micro-batch step of the probe's workload: forward + backward, no optimizer."""

    micro_batch: int
    checkpoint: bool
    peak_bytes: int  # peak live tensors (CUDA: max_memory_allocated beyond the start)
    samples_per_s: float


class Probe:
    """`probe(micro_batch, checkpoint)` measures that configuration once and caches it, so a
    plan and its check see the same numbers. `checkpoint=True` checkpoints every block."""

    def __init__(self, depth: int = 4, width: int = 32, repeats: int = 5):
        self.blocks, self.width, self.repeats = (
            make_blocks(depth, width, dropout=0.0),
            width,
            repeats,
        )
        self.cache: dict[tuple[int, bool], Measured] = {}

    def __call__(self, micro_batch: int, checkpoint: bool = False) -> Measured:
        if not isinstance(micro_batch, int) or micro_batch < 1:
            raise ValueError(f"micro_batch must be a positive int, got {micro_batch!r}")
        key = (micro_batch, bool(checkpoint))
        if key not in self.cache:
            self.cache[key] = self._measure(*key)
        return self.cache[key]

    def _measure(self, micro_batch: int, ckpt: bool) -> Measured:
        x = torch.randn(micro_batch, self.width, device=get_device())
        step = train_step(per_block_forward if ckpt else plain_forward, self.blocks, x)
        peak = step_peak_bytes(step, x.device)
        return Measured(micro_batch, ckpt, peak, micro_batch / time_step(step, self.repeats))


def step_peak_bytes(step: Callable[[], None], device: torch.device) -> int:
    """Peak bytes one call of `step()` adds. On CUDA one warm-up call comes first: the first
    matmul allocates cuBLAS's workspace (8 MiB, 32 MiB on Hopper) and the first backward the
    gradients, both kept afterwards, so without it the first configuration probed would be
    charged for them and later ones would not."""
    if device.type == "cuda":
        step()
        return cuda_peak_memory(step, device).extra_bytes
    return tensor_peak_bytes(step)


def per_block_forward(blocks: nn.Sequential, x: torch.Tensor) -> torch.Tensor:
    """Every block checkpointed: only block inputs are kept; all of the forward is redone."""
    for block in blocks:
        x = checkpoint(block, x, use_reentrant=False)
    return x


def plot_plans(probe: Probe, budgets: dict[str, int], chosen: dict[str, tuple], title: str):
    """Every configuration the probe measured (peak MiB, samples/s) and each budget's choice."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.6))
    for ckpt, marker in [(False, "o"), (True, "^")]:
        ms = [m for m in probe.cache.values() if m.checkpoint == ckpt]
        xy = [(m.peak_bytes / 2**20, m.samples_per_s) for m in ms]
        ax.scatter(*zip(*xy, strict=True), marker=marker, label=f"checkpoint={ckpt}")
        for m, point in zip(ms, xy, strict=True):
            ax.annotate(str(m.micro_batch), point, fontsize=7)
    for i, (name, b) in enumerate(budgets.items()):
        ax.axvline(b / 2**20, color=f"C{i + 2}", ls="--", label=f"{name} budget: {chosen[name]}")
    ax.set(xlabel="peak MiB per micro-step", ylabel="samples/s", yscale="log", title=title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig
