"""The slow training loop of lesson 10, the same loop with any chosen habit fixed, and a
colleague's evaluate for exercise 3 to diagnose.

`slow_train` is what the learner reads and diagnoses: seven habits that each look harmless,
written the way they appear in real code. `variant_train` is the same loop with a switch per
habit, so the ablation can time every habit alone; a test keeps the two in agreement.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import ProfilerActivity, profile

from ...mode import pick

HABITS = {  # name -> what it costs, in the words the checks and plots use
    "anomaly": "anomaly detection left on (a stack trace saved for every autograd op)",
    "profiler": "the profiler left on (every op recorded)",
    "loop-optimizer": "a Python for-loop optimizer (8 small ops per parameter tensor)",
    "syncs": "a .item() and a print every step (a host-device sync each)",
    "numpy-copies": "torch.tensor(numpy) copies every step",
    "host-tensors": "tensors built on the host, then moved (instead of device=)",
    "eval-autograd": "validation with autograd on (activations saved for nothing)",
}
LR, BETAS, EPS, WEIGHT_DECAY = 3e-3, (0.9, 0.999), 1e-8, 0.01


@dataclass
class NumpyData:
    """A classification set held as numpy arrays, as it often arrives (pandas, a file)."""

    x: np.ndarray  # (n, dim) float32, already normalised
    y: np.ndarray  # (n,) int64
    x_val: np.ndarray
    y_val: np.ndarray
    class_weights: list[float]  # for a weighted loss: the rarer classes count more
    batch_size: int

    def batch(self, step: int) -> tuple[np.ndarray, np.ndarray]:
        n = len(self.x) // self.batch_size
        i = (step % n) * self.batch_size
        return self.x[i : i + self.batch_size], self.y[i : i + self.batch_size]


def make_data(
    n: int | None = None,
    dim: int = 128,
    classes: int = 10,
    batch_size: int = 64,
    seed: int = 0,
    n_val: int = 512,
) -> NumpyData:
    """Labels from a fixed random teacher, so a model can learn them; deterministic."""
    rng = np.random.default_rng(seed)
    n = n or pick(quick=2048, full=8192)
    teacher = rng.normal(size=(dim, classes)).astype(np.float32)
    x = rng.normal(size=(n + n_val, dim)).astype(np.float32)
    y = (x @ teacher).argmax(1).astype(np.int64)
    counts = np.bincount(y, minlength=classes) + 1
    weights = (counts.sum() / (classes * counts)).round(3).tolist()
    return NumpyData(x[:n], y[:n], x[n:], y[n:], weights, batch_size)


class Block(nn.Module):
    """A pre-norm residual MLP block, as in transformers: x + W(gelu(LayerNorm(x)))."""

    def __init__(self, width: int):
        super().__init__()
        self.mlp = nn.Sequential(nn.LayerNorm(width), nn.GELU(), nn.Linear(width, width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.mlp(x)


def make_model(dim: int = 128, width: int = 64, depth: int = 12, classes: int = 10) -> nn.Module:
    """Many small blocks, 4 parameter tensors each, so per-tensor and per-op overheads show."""
    torch.manual_seed(0)
    blocks = [Block(width) for _ in range(depth)]
    return nn.Sequential(
        nn.Linear(dim, width), *blocks, nn.LayerNorm(width), nn.Linear(width, classes)
    )


@dataclass
class TrainLog:
    """What a run records: the training loss of every step, the accuracy of every validation."""

    losses: list[float] = field(default_factory=list)
    val_accuracy: list[float] = field(default_factory=list)
    profile: object | None = None  # the profiler that slow_train leaves behind


def slow_train(model, data, steps, device, eval_every=10, lr=LR):
    """AdamW, validation every `eval_every` steps: correct, and slow."""
    model.to(device).train()
    state = [(torch.zeros_like(p), torch.zeros_like(p)) for p in model.parameters()]
    log = TrainLog()
    with (
        torch.autograd.detect_anomaly(),
        profile(activities=[ProfilerActivity.CPU], record_shapes=True, profile_memory=True) as prof,
    ):
        for step in range(steps):
            xb, yb = data.batch(step)
            x, y = torch.tensor(xb).to(device), torch.tensor(yb).to(device)
            weight = torch.tensor(data.class_weights).to(device)
            loss = F.cross_entropy(model(x), y, weight=weight)
            model.zero_grad()
            loss.backward()
            adamw_step(model.parameters(), state, step + 1, lr)
            log.losses.append(loss.detach().item())
            print(f"step {step}: loss {log.losses[-1]:.4f}")
            if (step + 1) % eval_every == 0:
                model.eval()
                logits = model(torch.tensor(data.x_val).to(device))
                hits = logits.argmax(1) == torch.tensor(data.y_val).to(device)
                log.val_accuracy.append(hits.float().mean().item())
                model.train()
    log.profile = prof
    return log


def variant_train(model, data, steps, device, keep=(), eval_every=10, lr=LR):
    """The loop with every habit fixed except those named in `keep` (see HABITS)."""
    unknown = set(keep) - set(HABITS)
    if unknown:
        raise ValueError(f"unknown habits {sorted(unknown)}; known: {sorted(HABITS)}")
    model.to(device).train()
    params = list(model.parameters())
    state = [(torch.zeros_like(p), torch.zeros_like(p)) for p in params]
    optimizer = fastest_adamw(params, lr)
    copies = "numpy-copies" in keep
    if not copies:
        x_all, y_all = torch.from_numpy(data.x).to(device), torch.from_numpy(data.y).to(device)
        x_val, y_val = (
            torch.from_numpy(data.x_val).to(device),
            torch.from_numpy(data.y_val).to(device),
        )
    if "host-tensors" not in keep:
        weight = torch.tensor(data.class_weights, device=device)
    debug = torch.autograd.detect_anomaly() if "anomaly" in keep else contextlib.nullcontext()
    prof = (
        profile(activities=[ProfilerActivity.CPU], record_shapes=True, profile_memory=True)
        if "profiler" in keep
        else contextlib.nullcontext()
    )
    losses, accuracies = [], []
    with debug, prof:
        for step in range(steps):
            if copies:
                xb, yb = data.batch(step)
                x, y = torch.tensor(xb).to(device), torch.tensor(yb).to(device)
            else:
                i = (step % (len(data.x) // data.batch_size)) * data.batch_size
                x, y = x_all[i : i + data.batch_size], y_all[i : i + data.batch_size]
            if "host-tensors" in keep:
                weight = torch.tensor(data.class_weights).to(device)
            loss = F.cross_entropy(model(x), y, weight=weight)
            model.zero_grad()
            loss.backward()
            if "loop-optimizer" in keep:
                adamw_step(params, state, step + 1, lr)
            else:
                optimizer.step()
            if "syncs" in keep:
                losses.append(loss.detach().item())
                print(f"step {step}: loss {losses[-1]:.4f}")
            else:
                losses.append(loss.detach())
            if (step + 1) % eval_every == 0:
                if copies:
                    x_val, y_val = (
                        torch.tensor(data.x_val).to(device),
                        torch.tensor(data.y_val).to(device),
                    )
                accuracies.append(_accuracy(model, x_val, y_val, grad="eval-autograd" in keep))
    return TrainLog(*_floats(losses, accuracies))


def fastest_adamw(params, lr: float = LR) -> torch.optim.AdamW:
    """AdamW with the fused kernel where this torch and device have one, else foreach."""
    params = list(params)
    try:
        return torch.optim.AdamW(params, lr, BETAS, EPS, WEIGHT_DECAY, fused=True)
    except (RuntimeError, ValueError):  # e.g. no fused kernel for this device in this torch
        return torch.optim.AdamW(params, lr, BETAS, EPS, WEIGHT_DECAY, foreach=True)


@torch.no_grad()
def adamw_step(params, state, step: int, lr: float = LR) -> None:
    """AdamW (Loshchilov & Hutter 2019) one tensor at a time, op for op as torch.optim.AdamW
    with foreach=False computes it: 8 small ops per parameter tensor."""
    (beta1, beta2), bias1, bias2 = BETAS, 1 - BETAS[0] ** step, 1 - BETAS[1] ** step
    for p, (exp_avg, exp_avg_sq) in zip(params, state, strict=True):
        p.mul_(1 - lr * WEIGHT_DECAY)
        exp_avg.lerp_(p.grad, 1 - beta1)
        exp_avg_sq.mul_(beta2).addcmul_(p.grad, p.grad, value=1 - beta2)
        denom = (exp_avg_sq.sqrt() / bias2**0.5).add_(EPS)
        p.addcdiv_(exp_avg, denom, value=-lr / bias1)


def colleague_evaluate(model, x, y, batch_size=256):
    """A colleague's validation: "no gradients, so it is fast and cannot touch training"."""
    torch.set_grad_enabled(False)  # no graph, nothing saved for backward
    accuracies = []
    for i in range(0, len(x), batch_size):
        logits = model(x[i : i + batch_size])
        accuracies.append((logits.argmax(1) == y[i : i + batch_size]).float().mean())
    return torch.stack(accuracies).mean().item()


def _accuracy(model, x, y, grad: bool) -> torch.Tensor:
    model.eval()
    with torch.set_grad_enabled(grad):
        hits = model(x).argmax(1) == y
    model.train()
    return hits.float().mean()


def _floats(losses: list, accuracies: list) -> tuple[list[float], list[float]]:
    """Lists of tensors become lists of floats with one sync each (a no-op for floats)."""
    as_list = lambda xs: torch.stack(xs).tolist() if xs and torch.is_tensor(xs[0]) else list(xs)  # noqa: E731
    return as_list(losses), as_list(accuracies)


def quiet(fn, *args, **kwargs):
    """`fn(*args, **kwargs)` with its printing swallowed: the slow loop prints every step, and
    the profiler's C++ library writes a start and a stop line to file descriptor 2 per run."""
    with contextlib.redirect_stdout(io.StringIO()), _native_stderr_off():
        return fn(*args, **kwargs)


@contextlib.contextmanager
def _native_stderr_off():
    try:
        saved = os.dup(2)
    except OSError:  # no file descriptor 2 to silence
        yield
        return
    sys.stderr.flush()
    with open(os.devnull, "w") as devnull:
        os.dup2(devnull.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
