"""Lesson 01's workloads: in-memory data, a seeded SmallCNN, the three schedules compared,
what an optimizer really did at each step, and the summary of a comparison, built from
the run so no measured figure is ever typed into the notebook.

References: Smith 2017 (arXiv:1506.01186); Smith & Topin 2018 (arXiv:1708.07120); Smith 2018
(arXiv:1803.09820); Loshchilov & Hutter 2017, SGDR (arXiv:1608.03983) and 2019, AdamW
(arXiv:1711.05101); Goyal et al. 2017 on warm-up (arXiv:1706.02677).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator

import torch
from torch import nn
from torch.optim.lr_scheduler import CosineAnnealingLR, LinearLR, OneCycleLR, SequentialLR
from torch.utils.data import DataLoader, TensorDataset

from ...data import OfflineImages, dataset_source, load_data, test_transform, to_tensors
from ...device import get_device
from ...models import SmallCNN
from ...session import seed_everything
from ...train import History, train

WEIGHT_DECAY = 0.05  # AdamW's decoupled decay for this lesson's runs (torch's default: 0.01)
WARMUP_FRACTION = 0.1  # warm-up share of the warm-up + cosine schedule (a common choice)


@functools.cache
def decoded(source: str, n_train: int | None, n_test: int | None) -> tuple[torch.Tensor, ...]:
    """Decode once and keep the tensors: this lesson is about the schedule, not loading."""
    if source == "offline":  # built directly, so the checks get it whatever $COURSE_DATASET says
        tr = OfflineImages(n_train or 20_000, train=True, transform=test_transform())
        te = OfflineImages(n_test or 2_000, train=False, transform=test_transform())
    else:
        splits = load_data(n_train, n_test, augment=False)
        tr, te = splits.train, splits.test
    return (*to_tensors(tr), *to_tensors(te))


def data(n_train: int | None, n_test: int | None) -> tuple[torch.Tensor, ...]:
    """(x_train, y_train, x_test, y_test) from `dataset_source()`; prints what it loaded."""
    source = dataset_source()
    what = "CIFAR-10" if source == "cifar10" else "the offline image set (synthetic shapes)"
    print(f"Data: decoding {what} into memory...", flush=True)  # seconds on a busy CPU
    tensors = decoded(source, n_train, n_test)
    print(f"Data: {what}; {len(tensors[0]):,} training and {len(tensors[2]):,} test images.")
    return tensors


def loaders(tensors, batch_size: int = 64, seed: int = 0) -> tuple[DataLoader, DataLoader]:
    """A shuffled training loader (full batches only) and a test loader over tensors."""
    x_tr, y_tr, x_te, y_te = tensors
    g = torch.Generator().manual_seed(seed)
    train_loader = DataLoader(
        TensorDataset(x_tr, y_tr), batch_size, shuffle=True, drop_last=True, generator=g
    )
    return train_loader, DataLoader(TensorDataset(x_te, y_te), batch_size=500)


def batch_stream(x, y, batch_size: int = 64, seed: int = 0, device=None) -> Iterator:
    """An endless iterator of shuffled (inputs, targets) batches, already on `device`."""
    device = device or get_device()
    x, y = x.to(device), y.to(device)
    g = torch.Generator().manual_seed(seed)
    while True:
        perm = torch.randperm(len(x), generator=g).to(device)
        for i in range(0, len(x) - batch_size + 1, batch_size):
            idx = perm[i : i + batch_size]
            yield x[idx], y[idx]


def fresh_model(width: int = 16, seed: int = 0, device=None) -> nn.Module:
    """SmallCNN with seeded initial weights, on the device."""
    seed_everything(seed)
    return SmallCNN(width=width).to(device or get_device())


def train_on_next(model: nn.Module, optimizer, batches: Iterator, loss_fn: Callable) -> float:
    """One training step on the next batch of `batches`; its raw loss, as a float. The range
    test's loop around it (the lr, the smoothing, the stop) is the exercise; this is not."""
    x, y = next(batches)
    loss = loss_fn(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return loss.item()


def adamw(model: nn.Module, lr: float) -> torch.optim.AdamW:
    return torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=WEIGHT_DECAY)


def adamw_two_groups(model: nn.Module, lr: float) -> torch.optim.AdamW:
    """AdamW with two param groups, the classifier head (the last Linear layer) and the body,
    as fine-tuning splits them, but with the same settings: it trains exactly as `adamw` does
    (AdamW updates each tensor on its own), and a range test that sets only
    `param_groups[0]` leaves the body behind, as it would in real code. (Not a decay / no-decay
    split: that is exercise 3's answer.)"""
    head = [m for m in model.modules() if isinstance(m, nn.Linear)][-1]
    mine = {id(p) for p in head.parameters()}
    return torch.optim.AdamW(
        [
            {"params": list(head.parameters())},
            {"params": [p for p in model.parameters() if id(p) not in mine]},
        ],
        lr=lr,
        weight_decay=WEIGHT_DECAY,
    )


# --- the schedules compared -------------------------------------------------------------------


def make_schedule(
    kind: str, optimizer, steps: int, peak_lr: float, warmup_fraction: float = WARMUP_FRACTION
):
    """None (constant), OneCycleLR (PyTorch defaults), or linear warm-up then cosine decay
    (SequentialLR of LinearLR and CosineAnnealingLR), all counted in optimizer steps."""
    if kind == "constant":
        return None
    if kind == "one-cycle":
        return OneCycleLR(optimizer, max_lr=peak_lr, total_steps=steps)
    if kind == "warm-up + cosine":
        warm = max(1, int(warmup_fraction * steps))
        return SequentialLR(
            optimizer,
            [
                LinearLR(optimizer, start_factor=1 / 25, total_iters=warm),
                CosineAnnealingLR(optimizer, T_max=steps - warm),
            ],
            milestones=[warm],
        )
    raise ValueError(f"unknown schedule {kind!r}")


def train_run(
    tensors,
    lr: float,
    kind: str,
    *,
    steps: int,
    width: int,
    batch: int,
    eval_every: int,
    seed: int = 0,
    progress: bool = True,
    warmup_fraction: float = WARMUP_FRACTION,
) -> History:
    """A fresh SmallCNN trained for `steps` AdamW steps under schedule `kind` peaking at `lr`;
    the same initial weights and batch order for every schedule with the same seed."""
    model = fresh_model(width=width, seed=seed)
    optimizer = adamw(model, lr)
    scheduler = make_schedule(kind, optimizer, steps, lr, warmup_fraction)
    train_loader, test_loader = loaders(tensors, batch, seed=seed)
    return train(
        model,
        train_loader,
        optimizer,
        steps=steps,
        scheduler=scheduler,
        eval_loader=test_loader,
        eval_every=eval_every,
        progress=progress,
    )


def steps_table(runs: dict[str, History], target: float) -> str:
    """A Markdown table: steps to `target`, final accuracy and wall time, per run."""
    rows = [
        f"| run | steps to {target:.0%} | final accuracy | wall time |",
        "|---|---:|---:|---:|",
    ]
    for name, h in runs.items():
        steps = h.steps_to(target)
        shown = str(steps) if steps is not None else f"not in {h.step[-1]}"
        rows.append(f"| {name} | {shown} | {h.final_accuracy:.1%} | {h.seconds[-1]:.1f} s |")
    return "\n".join(rows)


def summary(
    runs: dict[str, dict[int, History]], baseline: History, target: float, info: dict
) -> str:
    """What this run measured, in words, for `display(Markdown(...))`: the effect of the range
    test (constant at its suggestion vs the default 1e-3) and of the schedule (one-cycle and
    warm-up + cosine vs constant, at the same peak), per seed."""

    def mean_acc(kind: str) -> float:
        return sum(h.final_accuracy for h in runs[kind].values()) / len(runs[kind])

    def steps(h: History) -> str:
        s = h.steps_to(target)
        return str(s) if s is not None else f">{h.step[-1]}"

    seeds = list(next(iter(runs.values())))
    lines = [
        f"**Measured here** ({info['device_class']}, {info['device_name']}, torch "
        f"{info['torch']}, data: {info['dataset']}, seeds {seeds}, {baseline.step[-1]} steps):",
        f"- the range test's effect: a constant lr at its suggestion ends at "
        f"{mean_acc('constant'):.1%} mean test accuracy, the default 1e-3 at "
        f"{baseline.final_accuracy:.1%} (seed {seeds[0]});",
    ]
    for kind in runs:
        per_seed = ", ".join(steps(h) for h in runs[kind].values())
        lines.append(
            f"- {kind}: steps to {target:.0%} per seed {per_seed}; mean final "
            f"accuracy {mean_acc(kind):.1%};"
        )
    best = max(runs, key=mean_acc)
    lines.append(
        f"- highest mean final accuracy: **{best}**. With {len(seeds)} seed(s), "
        "differences of a point or one evaluation interval are within noise."
    )
    return "\n".join(lines)


def plot_range_test(lrs, losses, *, title: str, raw=None, marks: dict | None = None):
    """The smoothed loss against the lr (log scale); `raw`: (lrs really used, raw losses);
    `marks`: {label: lr} drawn as vertical lines (a suggestion, the minimum)."""
    import matplotlib.pyplot as plt

    _, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(lrs, losses, label="smoothed loss (returned)")
    if raw is not None:
        ax.plot(*raw, color="grey", alpha=0.4, label="raw loss at the lr really used")
    for k, (label, lr) in enumerate((marks or {}).items()):
        ax.axvline(lr, color=f"C{k + 2}", linestyle="--", label=f"{label} {lr:.2g}")
    ax.set(xscale="log", xlabel="learning rate (log scale)", ylabel="training loss", title=title)
    ax.grid(alpha=0.3)
    ax.legend()
    return ax


# --- recording what an optimizer really did ---------------------------------------------------


class StepRecorder:
    """Records, at every optimizer.step(), the lr and momentum (SGD) or beta1 (Adam/AdamW) of
    param group 0, every group's lr, and the last raw loss `losses` holds: what the update
    really used."""

    def __init__(self, optimizer: torch.optim.Optimizer, losses: list[float] | None = None):
        self.lr: list[float] = []
        self.group_lrs: list[tuple[float, ...]] = []  # every group's lr, step by step
        self.momentum: list[float] = []
        self.loss: list[float] = []
        self._losses = losses
        self.handle = optimizer.register_step_pre_hook(self._record)

    def _record(self, optimizer, args, kwargs) -> None:
        group = optimizer.param_groups[0]
        self.lr.append(float(group["lr"]))
        self.group_lrs.append(tuple(float(g["lr"]) for g in optimizer.param_groups))
        self.momentum.append(
            float(group["betas"][0] if "betas" in group else group.get("momentum", 0.0))
        )
        if self._losses:
            self.loss.append(self._losses[-1])

    def remove(self) -> None:
        self.handle.remove()


class LossRecorder(nn.Module):
    """Cross-entropy that remembers every value it returned (the raw, unsmoothed losses)."""

    def __init__(self):
        super().__init__()
        self.values: list[float] = []

    def forward(self, logits, targets):
        loss = nn.functional.cross_entropy(logits, targets)
        self.values.append(loss.item())
        return loss


def record_schedule(
    fit_one_cycle: Callable,
    *,
    epochs: int = 3,
    steps_per_epoch: int = 20,
    max_lr: float = 0.01,
    items: int | None = None,
) -> tuple[list[float], list[float]]:
    """Run `fit_one_cycle` on a tiny model with AdamW; the per-step (lr, beta1) it used.
    The loader has batches of 16 over `items` examples (default: steps_per_epoch full batches;
    any other count leaves a partial last batch)."""
    seed_everything(0)
    model = nn.Linear(8, 4)
    optimizer = torch.optim.AdamW(model.parameters(), lr=max_lr)
    n = items if items is not None else steps_per_epoch * 16
    dataset = TensorDataset(torch.randn(n, 8), torch.randint(0, 4, (n,)))
    recorder = StepRecorder(optimizer)
    try:
        fit_one_cycle(
            model,
            optimizer,
            DataLoader(dataset, batch_size=16),
            epochs=epochs,
            max_lr=max_lr,
            loss_fn=nn.CrossEntropyLoss(),
        )
    finally:
        recorder.remove()
    return recorder.lr, recorder.momentum


# --- what decoupling changes ------------------------------------------------------------------

DECAY_SCALES = (1e-3, 1e-1, 1e1)  # sizes of the zero-mean gradient noise in decay_demo


def adam_step(
    p, grad, m, v, t, *, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, decoupled=False
):
    """One Adam step for one tensor (t from 1): L2 (torch.optim.Adam) or decoupled decay
    (torch.optim.AdamW, Loshchilov & Hutter 2019, Algorithm 2). Returns the new (p, m, v)."""
    beta1, beta2 = betas
    if decoupled:
        p = p * (1 - lr * weight_decay)  # shrink the weights, leave the gradient alone
    else:
        grad = grad + weight_decay * p  # the decay joins the gradient, then gets normalised
    m = beta1 * m + (1 - beta1) * grad
    v = beta2 * v + (1 - beta2) * grad * grad
    m_hat, v_hat = m / (1 - beta1**t), v / (1 - beta2**t)
    return p - lr * m_hat / (v_hat.sqrt() + eps), m, v


def decay_demo(
    steps: int = 300, lr: float = 1e-2, weight_decay: float = 0.1
) -> dict[str, list[float]]:
    """Weights receiving zero-mean gradient noise of different sizes: the mean weight left
    after `steps` steps under Adam + L2 and under AdamW, per scale in DECAY_SCALES."""
    out = {}
    for decoupled, name in ((False, "Adam + L2"), (True, "AdamW")):
        gen = torch.Generator().manual_seed(0)
        p = torch.ones(len(DECAY_SCALES), 256, dtype=torch.float64)
        m, v = torch.zeros_like(p), torch.zeros_like(p)
        scale = torch.tensor(DECAY_SCALES, dtype=torch.float64)[:, None]
        for t in range(1, steps + 1):
            g = scale * torch.randn(p.shape, generator=gen, dtype=torch.float64)
            p, m, v = adam_step(
                p, g, m, v, t, lr=lr, weight_decay=weight_decay, decoupled=decoupled
            )
        out[name] = p.mean(1).tolist()
    return out
