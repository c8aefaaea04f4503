"""Where a colleague's broken code shows its symptoms: lesson 08's diagnose-and-fix exercises
run the function a learner must repair on cases that tell its mistakes apart, and print what
differs, never why (finding the why is the exercise)."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from .demo import RunLog, amp_problem

NORM_TYPES = (1.0, 2.0, math.inf)


def _model(kind: str) -> nn.Module:
    """A model with gradients: one weight tensor, two layers, or two layers and a frozen one."""
    torch.manual_seed(0)
    if kind == "one tensor":
        model = nn.Linear(8, 4, bias=False)
    else:
        model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4), nn.Linear(4, 4))
        if kind == "frozen layer":
            model[3].requires_grad_(False)
    model(torch.randn(32, 8)).pow(2).sum().backward()
    return model


def _value(fn: Callable, parameters, norm_type: float) -> float | None:
    try:
        out = fn(parameters, norm_type)
        return float(out)
    except Exception:  # a symptom table reports a crash as a cell, it does not raise
        return None


def norm_table(total_norm: Callable) -> str:
    """A markdown table: `total_norm` against `clip_grad_norm_` on three models, given a list
    of parameters and given `model.parameters()` (a generator), for norm types 1, 2, inf."""
    head = "| model | passed as | " + " | ".join(f"p={p:g}" for p in NORM_TYPES) + " |"
    rows = [head, "|---|---|" + "---|" * len(NORM_TYPES)]
    for kind in ("one tensor", "two layers", "frozen layer"):
        model = _model(kind)
        for passed in ("list", "generator"):
            cells = []
            for p in NORM_TYPES:
                want = float(nn.utils.clip_grad_norm_(list(model.parameters()), math.inf, p))
                args = list(model.parameters()) if passed == "list" else model.parameters()
                got = _value(total_norm, args, p)
                ok = got is not None and math.isclose(got, want, rel_tol=1e-4)
                shown = "error" if got is None else f"{got:.4g}"
                cells.append(f"{shown} {'✓' if ok else f'✗ (want {want:.4g})'}")
            rows.append(f"| {kind} | {passed} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def train_amp(step: Callable, max_norm: float = 1.0, steps: int = 40, label: str = "") -> RunLog:
    """`step(model, loss_fn, x, y, optimizer, scaler, max_norm)` repeated on lesson 08's AMP
    problem (CPU): the loss before each step and the norm the step returned."""
    model, optimizer, scaler, x, y = amp_problem("cpu")
    log = RunLog(label or "AMP step", max_norm)
    for _ in range(steps):
        with torch.no_grad():
            log.loss.append(float(nn.functional.mse_loss(model(x), y)))
        norm = step(model, nn.functional.mse_loss, x, y, optimizer, scaler, max_norm)
        log.norm.append(float(norm) if norm is not None else math.nan)
    return log


def fp32_clipped_step(model, loss_fn, x, y, optimizer, scaler, max_norm) -> torch.Tensor:
    """The same clipping without mixed precision: no autocast, the scaler unused. What an AMP
    step with clipping should reproduce up to rounding."""
    optimizer.zero_grad(set_to_none=True)
    loss_fn(model(x), y).backward()
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return norm


def norm_summary(log: RunLog) -> str:
    """One line: what the norms a step returned looked like (median, largest finite)."""
    finite = sorted(n for n in log.norm if math.isfinite(n))
    if not finite:
        return "norms returned: none finite"
    return (
        f"norms returned: median {finite[len(finite) // 2]:.4g}, largest finite {finite[-1]:.4g}"
        f", loss {log.loss[0]:.4g} -> {log.loss[-1]:.4g}"
    )
