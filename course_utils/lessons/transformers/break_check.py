"""Lesson 12's graph-break check: the learner's block compiles into one graph and behaves as
the colleague's everywhere the training loop and the dashboard look: the output with and
without documents, the parameter gradients, and `last_rms` after an eager and a compiled
call. Its limits are in checks.THRESHOLDS. The learner's block runs only in a probe
(probes.block_readings), given the colleague's weights; the colleague's numbers are computed
here."""

from __future__ import annotations

import torch

from ...checks import Part, at_most, check, correct, not_applicable
from ...probes import observe, specimen_rng
from .attention import random_docs
from .checks import HINTS, THRESHOLDS, reraise
from .compiling import BLOCK_CONFIG, ColleagueBlock, block_input
from .probes import block_readings, output_gradient

N_DOCS = 4  # documents per row of the doc_ids probe
# The specimens, drawn per run in the judge (probes.specimen_rng: the first in a notebook,
# the ones the evidence was measured on): the colleague's weights (a seed), the input with and
# without doc_ids ((B, T, seed), the doc_ids' seed), another input for the compiled call. Every
# valid block gives exactly the colleague's numbers whatever they are (the evidence: 0), and
# each wrong one differs on any of them
WEIGHT_SEEDS = (0, 5, 6)
INPUTS = ((2, 24, 1), (2, 20, 4), (3, 16, 5))
DOC_SEEDS = (1, 7, 8)
COMPILED_INPUTS = ((3, 17, 2), (2, 19, 9), (4, 13, 10))
GRAD_SEED = 3  # the output gradient of the gradients' probe


def colleague_block(seed: int) -> ColleagueBlock:
    """The colleague's block with the weights drawn from `seed` (compiling.block_pair's), made
    without touching this process's random state."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return ColleagueBlock(BLOCK_CONFIG)


def _number(value) -> float | None:
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return float(value.detach())
    return float(value) if isinstance(value, (int, float)) else None


def _gap(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.detach() - b.detach().to(a.device)).abs().max().item()


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


def _gradients(colleague, want: torch.Tensor, seen: dict) -> Part:
    """Parameter gradients of the same output gradient: training must not change. The
    learner's come from its kernel (probes.block_readings), the colleague's from here."""
    if not seen["docs"]["requires_grad"]:
        return correct("same gradients", False, "the output does not require grad: nothing trains")
    if seen["grad_raised"] is not None:
        reraise(seen["grad_raised"])
    g = output_gradient(want.shape, GRAD_SEED)
    names, params = zip(*colleague.named_parameters(), strict=True)
    theirs = dict(zip(names, torch.autograd.grad(want, params, g, allow_unused=True), strict=True))
    yours = seen["grads"]
    none = [n for n in theirs if yours.get(n) is None]
    if none:
        listed = ", ".join(none[:4]) + (f" and {len(none) - 4} more" if len(none) > 4 else "")
        msg = (
            f"no gradient reaches {listed}: the output does not depend on them through "
            "autograd, so they would stop training"
        )
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


def _kept_number(kept: dict) -> float | None:
    """A `last_rms` as probes._kept describes it, read as the dashboard reads it."""
    return _number(kept["value"])


def _not_a_number(kept: dict) -> str:
    """What the dashboard's `float(block.last_rms)` finds instead of one number."""
    if kept["type"] == "NoneType":
        return "the block records no last_rms (the dashboard reads it after every step)"
    if kept["shape"] is not None:
        return (
            f"last_rms is a tensor of shape {tuple(kept['shape'])}: the dashboard's "
            "float(block.last_rms) needs one number (a Python number or a one-element tensor)"
        )
    return (
        f"last_rms holds a {kept['type']} value: the exercise asks for a Python number or a "
        "one-element tensor, which the dashboard's float(block.last_rms) reads"
    )


def _close(a: float | None, b: float | None) -> bool:
    rtol = THRESHOLDS["rms_rtol"].value
    return a is not None and b is not None and abs(a - b) <= rtol * abs(b)


def _statistic(stat: float, kept: dict) -> Part:
    value = _kept_number(kept)
    if value is None:
        return correct("statistic kept", False, _not_a_number(kept))
    rel = abs(value - stat) / abs(stat)
    holds = bool(kept["graph"])  # a tensor with a grad_fn: the step's autograd graph
    ok = rel <= THRESHOLDS["rms_rtol"].value and not holds
    msg = f"last_rms is {value:.6g}, the colleague's {stat:.6g}" + (
        "; it is attached to autograd (it has a grad_fn), so it keeps this step's whole "
        "autograd graph (activations included) alive until the next forward"
        if holds
        else ""
    )
    return correct("statistic kept", ok, msg)


def _recorded_again(part: Part, first: float, stat: float, kept: dict, docs_ok: bool) -> Part:
    """last_rms after a second eager call (the same input, with doc_ids), against the
    colleague's `stat` then: a block that records it only once still holds `first`."""
    value = _kept_number(kept)
    said = "after a second call (the same input, with doc_ids), last_rms"
    if value is None:
        return correct("statistic kept", False, f"{said}: {_not_a_number(kept)}")
    if _close(value, stat) or _close(stat, first):  # recorded (or the two calls agree)
        return part
    if not docs_ok:  # a block that ignores doc_ids repeats the first value: no cause to tell
        part.message += (
            "; after a second call with doc_ids it differs from the colleague's, which says "
            "nothing more while your outputs with doc_ids differ (the output part)"
        )
        return part
    if _close(value, first):
        msg = (
            f"{said} still holds the first call's {value:.6g} (the colleague's is now "
            f"{stat:.6g}): it is not recorded on every call"
        )
        return correct("statistic kept", False, msg)
    return correct("statistic kept", False, f"{said} is {value:.6g}, the colleague's {stat:.6g}")


def _compiled_statistic(stat: float, before: float | None, kept: dict) -> Part:
    """last_rms after a compiled call on another input: a block that records it only outside
    compilation still holds the previous call's value (every eager call records it: the
    statistic part saw it after two of them)."""
    value = _kept_number(kept)
    said = "after a compiled call on another input, last_rms is"
    if value is None:
        return correct(
            "statistic when compiled",
            False,
            f"after a compiled call on another input: {_not_a_number(kept)}",
        )
    if _close(value, stat):
        return correct("statistic when compiled", True, f"{said} {value:.6g}, as the colleague's")
    if _close(value, before):
        msg = (
            f"{said} still {value:.6g}, the previous call's value (the colleague's is now "
            f"{stat:.6g}): the compiled forward does not record it"
        )
    else:
        msg = f"{said} {value:.6g}, the colleague's {stat:.6g}"
    return correct("statistic when compiled", False, msg)


def _one_graph(g: dict) -> Part:
    """What TorchDynamo's explain made of the learner's block (counted in its kernel)."""
    graphs, breaks, ops, reasons = g["graphs"], g["breaks"], g["ops"], g["reasons"]
    one = graphs == 1 and breaks == 0 and ops > 0
    why = f"{graphs} graph(s), {max(breaks, 0)} break(s), {ops} ops captured"
    if reasons:
        why += f"; first break at {reasons[0]}"
    elif graphs == 0 or ops == 0:
        why += ": TorchDynamo captured no operation of the forward (nothing of it is compiled)"
    return correct("one graph", one, why + " (TorchDynamo's default settings)", value=graphs)


@check(
    "12-graph-break",
    points=2,
    hint=HINTS["graph_break"],
    in_kernel="the block's graphs and breaks, counted by TorchDynamo's explain in the kernel",
)
def check_graph_break(block_cls):
    """# CHANGED in issue 34: the exercise now says what `last_rms` may hold (a Python
    number or a one-element tensor); every message was reviewed against what confirms it.
    A statistic is blamed for keeping the step's graph alive only when it has a grad_fn; a
    statistic the eager forward records once is told so (read after a second eager call),
    so "the compiled forward does not record it" is said only when every eager call does;
    a tensor of the wrong shape, or none, is told as such; no gradient is told as measured."""
    rng = specimen_rng()
    seed, (B, T, x_seed) = rng.choice(WEIGHT_SEEDS), rng.choice(INPUTS)
    doc_seed, compiled_spec = rng.choice(DOC_SEEDS), rng.choice(COMPILED_INPUTS)
    colleague = colleague_block(seed)
    seen = observe(
        block_readings,
        block_cls,
        colleague.state_dict(),
        [B, T, x_seed],
        doc_seed,
        N_DOCS,
        list(compiled_spec),
        GRAD_SEED,
    )
    x = block_input(B, T, seed=x_seed)
    want = colleague(x)
    first = _number(colleague.last_rms)
    stat = _statistic(first, seen["stat"])
    want_docs = colleague(x, random_docs(B, T, N_DOCS, seed=doc_seed))
    output = _output(want, seen["plain"]["out"], want_docs, seen["docs"]["out"])
    if stat.status != "failed":
        docs_ok = output.status != "failed"
        stat = _recorded_again(stat, first, _number(colleague.last_rms), seen["before"], docs_ok)
    if output.status == "failed":
        grads = not_applicable("same gradients", "not compared: the outputs differ")
    else:
        grads = _gradients(colleague, want_docs, seen)
    parts = [output, grads, stat]
    before = _kept_number(seen["before"])
    graph = _one_graph(seen["graphs"])
    if stat.status == "failed":
        compiled = not_applicable("statistic when compiled", "not read: fix the statistic first")
    else:
        B2, T2, seed2 = compiled_spec
        colleague(block_input(B2, T2, seed=seed2))
        compiled = _compiled_statistic(_number(colleague.last_rms), before, seen["after"])
    return parts + [compiled, graph]
