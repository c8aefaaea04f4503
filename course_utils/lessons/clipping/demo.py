"""Lesson 08's workloads: an RNN whose gradients explode, runs with and without clipping,
the norm history, and what logging a norm costs on an asynchronous device.

The task: read 30 random numbers and output the sum of the first three, so the gradient must
travel back through the whole sequence. With the recurrent weight an orthogonal matrix times
1.5 (`SeqRNN(recurrent_scale=1.5)`), backpropagation through time multiplies the gradient by
up to 1.5 per step, and plain SGD at lr 0.1 diverges (Pascanu et al. 2013, arXiv:1211.5063).
"""

from __future__ import annotations

import contextlib
import math
import random
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field

import torch
from torch import nn

from ...device import get_device
from ...measure import Comparison, compare, steady_cpu
from ...mode import pick
from ...models import MLP, SeqRNN
from ...progress import tqdm

SEQ_LEN, REMEMBER, HIDDEN, BATCH = 30, 3, 32, 64
RECURRENT_SCALE, LR = 1.5, 0.1  # diverges unclipped in ~40 steps (seeds 0-4, torch 2.14 CPU)

Step = Callable[..., object]  # step(model, loss_fn, x, y, optimizer, max_norm) -> norm


def rnn_steps() -> int:
    return pick(quick=150, full=400)


def rnn_batches(seed: int = 1) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    while True:
        x = torch.randn(BATCH, SEQ_LEN, 1, generator=g)
        yield x, x[:, :REMEMBER, 0].sum(1)


def make_rnn(seed: int = 0) -> SeqRNN:
    torch.manual_seed(seed)
    return SeqRNN(1, HIDDEN, recurrent_scale=RECURRENT_SCALE)


@dataclass
class RunLog:
    """One training run: loss and gradient norm (before clipping) per step."""

    label: str
    max_norm: float | None
    loss: list[float] = field(default_factory=list)
    norm: list[float] = field(default_factory=list)

    @property
    def diverged(self) -> bool:
        """NaN/inf, or a loss 10x above where it started."""
        return not math.isfinite(self.loss[-1]) or max(self.loss) > 10 * self.loss[0]

    @property
    def final_loss(self) -> float:
        """Mean loss of the last 20 steps (inf if the run diverged to NaN/inf)."""
        tail = self.loss[-20:]
        return sum(tail) / len(tail) if all(math.isfinite(v) for v in tail) else math.inf

    @property
    def clipped_fraction(self) -> float:
        """Share of steps whose norm was above max_norm, i.e. that clipping changed."""
        if self.max_norm is None:
            return 0.0
        return sum(n > self.max_norm for n in self.norm) / len(self.norm)

    def to_dict(self) -> dict:
        return {**asdict(self), "diverged": self.diverged, "final_loss": self.final_loss}

    def __str__(self) -> str:
        verdict = "DIVERGED" if self.diverged else f"final loss {self.final_loss:.3f}"
        return (
            f"{self.label:<28} {len(self.loss):4d} steps, start loss {self.loss[0]:.2f}, {verdict}"
        )


def measured_norm(parameters) -> torch.Tensor:
    """The gradients' total 2-norm, leaving them as they are: `clip_grad_norm_` with no limit
    scales them by min(1, inf / norm) = 1 (a non-finite norm stays non-finite, as it was)."""
    return nn.utils.clip_grad_norm_(parameters, math.inf)


def unclipped_step(model, loss_fn, x, y, optimizer, max_norm=None) -> torch.Tensor:
    """The baseline: plain SGD; the norm is only measured."""
    optimizer.zero_grad(set_to_none=True)
    loss_fn(model(x), y).backward()
    norm = measured_norm(model.parameters())
    optimizer.step()
    return norm


def by_value_step(model, loss_fn, x, y, optimizer, max_norm) -> torch.Tensor:
    """The guide's "min(gradient, threshold)": every entry clamped to [-max_norm, max_norm]."""
    optimizer.zero_grad(set_to_none=True)
    loss_fn(model(x), y).backward()
    norm = measured_norm(model.parameters())
    nn.utils.clip_grad_value_(model.parameters(), max_norm)
    optimizer.step()
    return norm


def train_rnn(
    step: Step, max_norm: float | None, *, steps: int | None = None, seed: int = 0, label: str = ""
) -> RunLog:
    """Train the exploding RNN (on the CPU) with `step`: log the loss of the weights each step
    starts from and the norm the step returns; stop once the loss is NaN/inf."""
    model, batches = make_rnn(seed), rnn_batches(seed + 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    log = RunLog(label or f"max_norm={max_norm}", max_norm)
    with steady_cpu(1), _flush_denormal():
        for _ in tqdm(range(steps or rnn_steps()), desc=log.label, leave=False):
            x, y = next(batches)
            with torch.no_grad():  # the loss of the weights the step starts from
                log.loss.append(float(nn.functional.mse_loss(model(x), y)))
            norm = step(model, nn.functional.mse_loss, x, y, optimizer, max_norm)
            log.norm.append(float(norm) if norm is not None else math.nan)  # None: not returned
            if not math.isfinite(log.loss[-1]):
                break
    return log


@contextlib.contextmanager
def _flush_denormal():
    """A saturating RNN computes with denormal floats, which are 10-100x slower on x86 CPUs;
    flushing them to zero changes nothing we measure and keeps a diverging run fast."""
    torch.set_flush_denormal(True)  # PyTorch's default is False, restored below
    try:
        yield
    finally:
        torch.set_flush_denormal(False)


def plot_runs(logs: list[RunLog], threshold: float | None = None):
    """Loss and gradient norm per step (log scale), the chosen threshold as a line."""
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.5))
    for i, log in enumerate(logs):
        left.plot(log.loss, label=log.label, color=f"C{i}")
        right.plot(log.norm, label=log.label, color=f"C{i}", alpha=0.8)
    if threshold is not None:
        right.axhline(threshold, color="grey", linestyle="--", label=f"max_norm {threshold:.3g}")
    left.set(xlabel="step", ylabel="training loss (MSE)", yscale="log", title="loss")
    right.set(xlabel="step", ylabel="total gradient norm", yscale="log", title="before clipping")
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def sweep(step: Step, thresholds: list[float]) -> list[RunLog]:
    """One run per threshold: the final loss, and how often clipping was active."""
    return [train_rnn(step, t, label=f"max_norm={t:g}") for t in thresholds]


def plot_sweep(logs: list[RunLog], suggested: float | None = None):
    """Final loss against max_norm, each point labelled with the share of steps clipped."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.4))
    xs = [log.max_norm for log in logs]
    ys = [min(log.final_loss, 1e3) for log in logs]
    ax.plot(xs, ys, marker="o")
    for x, y, log in zip(xs, ys, logs, strict=True):
        ax.annotate(
            f"{log.clipped_fraction:.0%} clipped",
            (x, y),
            textcoords="offset points",
            xytext=(4, 6),
            fontsize=8,
        )
    if suggested is not None:
        ax.axvline(suggested, color="grey", linestyle="--", label=f"your rule: {suggested:.3g}")
        ax.legend()
    ax.set(xscale="log", yscale="log", xlabel="max_norm", ylabel="final loss (capped at 1e3)")
    ax.set_title("threshold sweep on the exploding RNN")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


# --- what logging a norm costs ------------------------------------------------------------


def logging_cost(steps: int = 50, device: torch.device | str | None = None) -> Comparison | None:
    """`.item()` on the norm every step vs keeping the tensors and reading them once, timed in
    interleaved pairs (`compare`). Only an asynchronous device (CUDA) can show a difference:
    on a CPU every kernel has finished when it returns, so there is nothing to wait for (None).
    """
    device = torch.device(device) if device is not None else get_device()
    if device.type != "cuda":
        return None
    model = MLP(dim=512, hidden=2048, depth=4).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    x, y = torch.randn(256, 512, device=device), torch.randint(0, 10, (256,), device=device)

    def run(sync_each_step: bool) -> None:
        kept = []
        for _ in range(steps):
            norm = unclipped_step(model, nn.functional.cross_entropy, x, y, optimizer)
            kept.append(norm.item() if sync_each_step else norm)  # .item(): wait for the GPU
        torch.stack([torch.as_tensor(k, device=device) for k in kept]).cpu()  # read all once

    labels = (".item() every step", "tensors, read once")
    return compare(
        lambda: run(True), lambda: run(False), warmup=1, repeats=10, device=device, labels=labels
    )


# --- norm histories whose typical norm is known (exercise 3's check) -----------------------


def synthetic_history(
    seed: int,
    bulk: float,
    sigma: float,
    spikes: float,
    nonfinite: bool,
    *,
    first: float = 1.0,
    ramp: int = 0,
    skipped: int = 0,
) -> list[float]:
    """Typical norms (log-normal around `bulk`) with rare spikes 1e3-1e4x larger, as a run
    with exploding gradients logs them; optionally ending in inf and NaN. `first`: the first
    three norms are that many times the bulk (an untrained model's large first gradients);
    `ramp`: the last `ramp` finite norms grow geometrically up to 1e3x the bulk, as a run
    that diverges does before it overflows. `skipped`: that many steps in the middle of the
    run logged inf (a GradScaler skips such steps, lesson 04) and one logged NaN, and the
    entries in the middle of the history, as logged and with those left out, are spikes: the
    middle of a history in the order it was logged is not its typical step."""
    rng = random.Random(seed)
    norms = [bulk * math.exp(rng.gauss(0, sigma)) for _ in range(300)]
    for i in rng.sample(range(300), int(spikes * 300)):
        norms[i] = bulk * 10 ** rng.uniform(3, 4)
    norms[:3] = [first * n for n in norms[:3]]
    norms += [bulk * 1e3 ** ((i + 1) / ramp) for i in range(ramp)]
    if skipped:
        middle = len(norms) // 2
        for i in rng.sample(range(10, middle - 10), skipped):
            norms[i] = math.inf
        norms[middle - 1], norms[middle] = math.nan, bulk * 10 ** rng.uniform(3, 4)
        kept = [i for i, n in enumerate(norms) if math.isfinite(n)]
        norms[kept[len(kept) // 2]] = bulk * 10 ** rng.uniform(3, 4)
    return norms + ([math.inf, math.nan] if nonfinite else [])


HISTORIES = {  # name -> (seed, bulk median, spread sigma, fraction of spikes, ends in inf/nan)
    "norms ~2, 5% spikes, then inf/nan": (0, 2.0, 0.6, 0.05, True),
    "norms ~0.05, 2% spikes": (1, 0.05, 0.4, 0.02, False),
    "norms ~30, 3% spikes, then inf/nan": (2, 30.0, 0.5, 0.03, True),
    "norms ~0.5, 4% spikes, skipped steps (inf, NaN) mid-run": (3, 0.5, 0.5, 0.04, False),
    "norms ~5, 8% spikes, all finite, odd length": (4, 5.0, 0.5, 0.08, False),
}
# name -> the history's shape beyond its bulk: large first steps, a climb before the overflow,
# steps a GradScaler skipped in the middle of the run
SHAPES = {
    "norms ~2, 5% spikes, then inf/nan": {"ramp": 8},
    "norms ~0.05, 2% spikes": {"first": 40.0},
    "norms ~30, 3% spikes, then inf/nan": {"first": 0.05, "ramp": 5},
    "norms ~0.5, 4% spikes, skipped steps (inf, NaN) mid-run": {"skipped": 6},
    # more spikes than 5% (24 of 301, and the last step 1e3x): a rule that trims a fixed 5%
    # before a mean or a maximum, or reads the 95th percentile, lands among them; the median
    # and the 90th percentile do not (tests/test_lesson_08.py measures both, for seeds 4, 14)
    "norms ~5, 8% spikes, all finite, odd length": {"ramp": 1},
}
