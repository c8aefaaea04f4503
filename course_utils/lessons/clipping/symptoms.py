"""Where a colleague's broken code shows its symptoms: lesson 08's diagnose-and-fix exercises
run the function a learner must repair on cases that tell its mistakes apart, and print what
differs, never why (finding the why is the exercise)."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from . import accumulation
from .demo import RunLog

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


def norm_summary(log: RunLog) -> str:
    """One line: the first norms a step returned, how many were exactly 0, the largest finite
    one, and the loss at the start and at the end."""
    finite = [n for n in log.norm if math.isfinite(n)]
    if not finite:
        return "norms returned: none finite"
    first = ", ".join(f"{n:.3g}" for n in log.norm[:3])
    zeros = sum(n == 0 for n in log.norm)
    return (
        f"norms returned: first {first}; {zeros} of {len(log.norm)} were 0; largest finite "
        f"{max(finite):.4g}; loss {log.loss[0]:.4g} -> {log.loss[-1]:.4g}"
    )


ACCUM_CASES = (1, 2, 4, 8)  # micro-batches per step in accumulation_table
IDLE, ACTS = 1000.0, 1.0  # max_norm far above the RNN's first gradient norms (~10), and below


def accumulation_table(step: Callable) -> str:
    """A markdown table: one step of `step(model, loss_fn, micro_batches, optimizer, max_norm)`
    on the exploding RNN's first batch of 64, cut into 1, 2, 4 and 8 micro-batches, against one
    clipped step on the whole batch, with clipping idle and acting: whether the parameters
    agree, and the norm each returned."""
    model, batches = accumulation.accum_case(0, 1, 1, steps=1)
    whole = {m: accumulation.whole_batch(model, batches, m) for m in (IDLE, ACTS)}
    head = "| micro-batches × samples | " + " | ".join(
        f"max_norm={m:g} ({'clipping idle' if m == IDLE else 'clipping acts'})" for m in whole
    )
    rows = [head + " |", "|---|" + "---|" * len(whole)]
    for k in ACCUM_CASES:
        micro = [accumulation.split(*batches[0][0], k)]
        cells = []
        for max_norm, want in whole.items():
            try:
                got = accumulation.run_steps(step, model, micro, max_norm)
            except Exception as exc:  # a symptom table reports a crash as a cell, it does not raise
                cells.append(f"error: {type(exc).__name__}")
                continue
            off = accumulation.largest_difference(got["params"], want["params"])
            verdict = (
                "✓ same step"
                if accumulation.same(got["params"], want["params"])
                else (f"✗ parameters off by up to {off:.2g}")
            )
            cells.append(
                f"{verdict}; norm returned {_shown(got['norms'][0])} "
                f"(whole batch: {float(want['norms'][0]):.4g})"
            )
        rows.append(f"| {k} × {64 // k} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def _shown(norm) -> str:
    try:
        return f"{float(norm):.4g}"
    except (TypeError, ValueError):
        return repr(norm)
