"""A colleague's code that lesson 02b's exercises 1 and 2 diagnose and fix: a linear-scaling
schedule with warm-up, and a LARS optimizer, each with faults a practitioner makes; and the
measurement that shows the LARS faults' symptoms on a small network. The notebook shows both
with `cu.show_source`; the checks grade the learner's fixed versions (lr_check.py,
lars_check.py), and the tests hold that each check names every fault of these two as it stands."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ...measure import steady_cpu


def colleague_schedule(optimizer, batch_size, warmup_steps, base_batch=256):
    """A colleague's linear LR scaling with warm-up (Goyal et al. 2017), stepped per batch."""
    k = batch_size // base_batch  # how many base batches in one batch

    def factor(step):
        return k * min(step + 1, warmup_steps) / warmup_steps  # ramp up to k over the warm-up

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


class ColleagueLARS(torch.optim.Optimizer):
    """A colleague's LARS (You et al. 2017): SGD with momentum, each tensor's step scaled by
    its trust ratio."""

    def __init__(self, params, lr, momentum=0.9, weight_decay=0.0, trust_coef=0.001, eps=1e-8):
        settings = dict(momentum=momentum, weight_decay=weight_decay, trust_coef=trust_coef)
        super().__init__(params, dict(lr=lr, eps=eps, **settings))

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            wd, eta = group["weight_decay"], group["trust_coef"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                ratio = eta * p.norm() / (p.grad.norm() + wd * p.norm() + group["eps"])
                d = p.grad + wd * p
                buf = self.state[p].setdefault("momentum_buffer", torch.zeros_like(p))
                buf.mul_(group["momentum"]).add_(ratio * d)
                p.sub_(buf, alpha=self.defaults["lr"])


# The network the symptoms are measured on: a hidden layer with BatchNorm (whose bias starts
# at zero) and a residual branch whose weight starts at zero (as adapters and zero-initialised
# residual blocks start), a classifier head; a linear warm-up over the steps.
SYMPTOMS = dict(inputs=64, hidden=32, classes=10, batch=256, steps=5, lr=2.0, trust_coef=0.02)


class SymptomNet(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        s = SYMPTOMS
        self.hidden = nn.Linear(s["inputs"], s["hidden"])
        self.norm = nn.BatchNorm1d(s["hidden"])
        self.branch = nn.Linear(s["hidden"], s["hidden"], bias=False)
        self.head = nn.Linear(s["hidden"], s["classes"])
        nn.init.zeros_(self.branch.weight)  # the residual branch starts as the identity

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.norm(self.hidden(x)))
        return self.head(h + self.branch(h))


def measure_symptoms(optimizer_class) -> dict:
    """Train SymptomNet for a few steps with `optimizer_class` (a LARS-like class: lr,
    momentum, weight_decay, trust_coef) under a linear warm-up scheduler. Returns, per tensor,
    its norm and its gradient's norm at the start and how far each step moved it; the LR the
    scheduler set for each step; the loss before each step and after the last."""
    s = SYMPTOMS
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(s["batch"], s["inputs"], generator=gen)
    y = x[:, : s["classes"]].argmax(1)  # a rule the network can learn
    net = SymptomNet()
    opt = optimizer_class(
        net.parameters(), lr=s["lr"], momentum=0.9, weight_decay=5e-4, trust_coef=s["trust_coef"]
    )
    warmup = torch.optim.lr_scheduler.LambdaLR(opt, lambda t: min(1.0, (t + 1) / s["steps"]))
    params = dict(net.named_parameters())
    start = {n: p.detach().clone() for n, p in params.items()}
    moves, lrs, losses, grads = [], [], [], {}
    with steady_cpu():
        for _ in range(s["steps"]):
            before = {n: p.detach().clone() for n, p in params.items()}
            loss = F.cross_entropy(net(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            grads = grads or {n: float(p.grad.norm()) for n, p in params.items()}
            lrs.append(opt.param_groups[0]["lr"])
            opt.step()
            warmup.step()
            moves.append({n: float((p.detach() - before[n]).norm()) for n, p in params.items()})
            losses.append(float(loss.detach()))
        with torch.no_grad():
            losses.append(float(F.cross_entropy(net(x), y)))
    return dict(start=start, grads=grads, moves=moves, lrs=lrs, losses=losses)


def lars_symptoms(optimizer_class) -> str:
    """measure_symptoms as a table. At the first step the momentum buffer holds one update, so
    LARS moves a weight matrix by about LR x trust_coef x |w| (the ratio column near 1), and a
    1-D tensor by about LR x its gradient norm."""
    m = measure_symptoms(optimizer_class)
    eta, lrs, moves, last = SYMPTOMS["trust_coef"], m["lrs"], m["moves"], len(m["lrs"])
    rows = [
        "LR the scheduler set for each step: " + ", ".join(f"{lr:.3g}" for lr in lrs),
        f"{'tensor':<14}{'shape':>7}{'|w| start':>11}{'|g| step 1':>12}{'moved, step 1':>15}"
        f"{'/ (LR eta |w|)':>16}{f'moved, step {last}':>15}",
    ]
    for name, w0 in m["start"].items():
        w = float(w0.norm())
        ratio = f"{moves[0][name] / (lrs[0] * eta * w):.3g}" if w > 0 else "|w| = 0"
        shape = "x".join(str(n) for n in w0.shape)
        rows.append(
            f"{name:<14}{shape:>7}{w:>11.4g}{m['grads'][name]:>12.4g}{moves[0][name]:>15.4g}"
            f"{ratio:>16}{moves[-1][name]:>15.4g}"
        )
    losses = ", ".join(f"{v:.3f}" for v in m["losses"])
    rows.append(f"loss before each step, then after the last: {losses}")
    return "\n".join(rows)
