"""Lesson 12's graph-break check: the learner's block compiles into one graph and behaves as
the colleague's everywhere the training loop and the dashboard look: the output with and
without documents, the parameter gradients, and `last_rms` after an eager and a compiled
call. Its limits are in checks.THRESHOLDS."""

from __future__ import annotations

import torch
from torch import nn

from ...checks import Part, at_most, check, correct, not_applicable
from ...guards import _as_learner
from .attention import random_docs
from .checks import HINTS, THRESHOLDS
from .compiling import block_input, block_pair, graphs_of
from .reference import ReferenceBlock

_run = _as_learner(lambda fn, *args: fn(*args))
N_DOCS = 4  # documents per row of the doc_ids probe
COMPILED_INPUT = (3, 17, 2)  # (B, T, seed): another input for the compiled call


def _number(value) -> float | None:
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return float(value.detach())
    return float(value) if isinstance(value, (int, float)) else None


def _gap(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.detach() - b.detach()).abs().max().item()


def _output(want: torch.Tensor, got: torch.Tensor, want_docs, got_docs) -> Part:
    """Outputs without and with doc_ids; when only the second differs, whether yours is the
    output without documents (doc_ids dropped on the way to the attention)."""
    atol = THRESHOLDS["block_atol"].value
    plain, docs = _gap(got, want), _gap(got_docs, want_docs)
    part = at_most("same output", max(plain, docs), atol, "max |yours - colleague's|, same weights")
    if part.status != "failed":
        return part
    if plain > atol:
        part.message += f"; {plain:.2g} without doc_ids, {docs:.2g} with"
    elif _gap(got_docs, want) <= atol:
        part.message += (
            f"; equal without doc_ids, but with doc_ids ({N_DOCS} documents per row) yours is "
            "the output without documents: doc_ids do not reach the attention"
        )
    else:
        part.message += f"; equal without doc_ids, {docs:.2g} apart with doc_ids"
    return part


def _grads(module: nn.Module, out: torch.Tensor, g: torch.Tensor) -> dict:
    names, params = zip(*module.named_parameters(), strict=True)
    return dict(zip(names, torch.autograd.grad(out, params, g, allow_unused=True), strict=True))


def _gradients(colleague: nn.Module, mine: nn.Module, want: torch.Tensor, got) -> Part:
    """Parameter gradients of the same output gradient: training must not change."""
    if not got.requires_grad:
        return correct("same gradients", False, "the output does not require grad: nothing trains")
    g = torch.randn(want.shape, generator=torch.Generator().manual_seed(3))
    theirs, yours = _grads(colleague, want, g), _grads(mine, got, g)
    none = [n for n in theirs if yours.get(n) is None]
    if none:
        listed = ", ".join(none[:4]) + (f" and {len(none) - 4} more" if len(none) > 4 else "")
        msg = f"no gradient reaches {listed}: they would stop training (detached on the way?)"
        return correct("same gradients", False, msg)
    err, worst = max((_gap(yours[n], theirs[n]), n) for n in theirs)
    part = at_most(
        "same gradients",
        err,
        THRESHOLDS["block_grad_atol"].value,
        "max |your parameter gradients - colleague's|, with doc_ids",
    )
    if part.status == "failed":
        part.message += f" (largest at {worst})"
    return part


def _statistic(stat: float, kept) -> Part:
    value = _number(kept)
    if value is None:
        msg = (
            f"last_rms is {type(kept).__name__}: the dashboard reads a number (or a one-element "
            "tensor) there"
        )
        return correct("statistic kept", False, msg)
    rel = abs(value - stat) / abs(stat)
    holds = isinstance(kept, torch.Tensor) and kept.requires_grad
    ok = rel <= THRESHOLDS["rms_rtol"].value and not holds
    msg = f"last_rms is {value:.6g}, the colleague's {stat:.6g}" + (
        "; it requires grad, so it keeps this step's whole autograd graph (activations "
        "included) alive until the next forward"
        if holds
        else ""
    )
    return correct("statistic kept", ok, msg)


def _compiled_statistic(stat: float, before: float | None, kept) -> Part:
    """last_rms after a compiled call on another input: a block that records it only outside
    compilation still holds the previous call's value."""
    value, rtol = _number(kept), THRESHOLDS["rms_rtol"].value
    said = "after a compiled call on another input, last_rms is"
    if value is None:
        return correct("statistic when compiled", False, f"{said} {type(kept).__name__}")
    if abs(value - stat) <= rtol * abs(stat):
        return correct("statistic when compiled", True, f"{said} {value:.6g}, as the colleague's")
    if before is not None and abs(value - before) <= rtol * abs(before):
        msg = (
            f"{said} still {value:.6g}, the previous call's value (the colleague's is now "
            f"{stat:.6g}): the compiled forward does not record it"
        )
    else:
        msg = f"{said} {value:.6g}, the colleague's {stat:.6g}"
    return correct("statistic when compiled", False, msg)


def _one_graph(run, mine: nn.Module, x: torch.Tensor) -> Part:
    g = run(graphs_of, mine, x)
    one = g.graphs == 1 and g.breaks == 0 and g.ops > 0
    why = f"{g.graphs} graph(s), {max(g.breaks, 0)} break(s), {g.ops} ops captured"
    if g.reasons:
        why += f"; first break at {g.reasons[0]}"
    elif g.graphs == 0 or g.ops == 0:
        why += ": TorchDynamo captured nothing (is the forward excluded from compilation?)"
    return correct("one graph", one, why + " (TorchDynamo's default settings)", value=g.graphs)


@check("12-graph-break", points=2, hint=HINTS["graph_break"])
def check_graph_break(block_cls):
    run = (lambda fn, *a: fn(*a)) if block_cls is ReferenceBlock else _run
    colleague, mine = block_pair(block_cls)
    x = block_input()
    want, got = colleague(x), run(mine, x)
    stat = _statistic(_number(colleague.last_rms), getattr(mine, "last_rms", None))
    doc_ids = random_docs(x.shape[0], x.shape[1], N_DOCS, seed=1)
    want_docs, got_docs = colleague(x, doc_ids), run(mine, x, doc_ids)
    output = _output(want, got, want_docs, got_docs)
    if output.status == "failed":
        grads = not_applicable("same gradients", "not compared: the outputs differ")
    else:
        grads = _gradients(colleague, mine, want_docs, got_docs)
    parts = [output, grads, stat]
    before = _number(getattr(mine, "last_rms", None))
    B, T, seed = COMPILED_INPUT
    x2 = block_input(B, T, seed=seed)
    graph = _one_graph(run, mine, x2)  # explain runs the compiled forward once
    if stat.status == "failed":
        compiled = not_applicable("statistic when compiled", "not read: fix the statistic first")
    else:
        colleague(x2)
        compiled = _compiled_statistic(
            _number(colleague.last_rms), before, getattr(mine, "last_rms", None)
        )
    return parts + [compiled, graph]
