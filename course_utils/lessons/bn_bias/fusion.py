"""Lesson 09's third check: conv+BN fusion for inference, graded on the custom-block model
(outputs, modes, batch-norm calls), on a model whose channels vary little (where BatchNorm's
eps matters), and by the speed of the fused copy, timed from the check's side against the
unfused net run there (so the learner's code can slow neither)."""

from __future__ import annotations

import copy
import secrets
import statistics
import time

import torch
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.utils.fusion import fuse_conv_bn_eval

from ...checks import at_least, at_most, check, correct, retry_measure
from ...device import device_class, get_device, synchronize
from ...measure import steady_cpu
from ...probes import observe, observe_timed, specimen_rng
from . import demo
from .checks import THRESHOLDS
from .probes import (
    batch_norm_calls,
    differ,
    fuse_case,
    fused_copy,
    fused_forwards,
    outputs,
    pointwise_case,
    pointwise_work,
)

# --- exercise 3: fuse conv+BN for inference -------------------------------------------------

# the seeds of scenario_model and small_variance_model, drawn per run (the first in a
# notebook): a seed moves weights and statistics, never which pairs fuse or the variances
FUSE_SEEDS = (0, 3, 5)


@check(
    "09-fuse",
    points=1,
    hint="Reread section 4: which pairs can fold (a conv whose output reaches only its BN), "
    "what the folded weights and bias are, and which model you may change (the one given "
    "to you is still training). The failing part names what differs: the model you were "
    "given, the copy's mode, an output, or the batch-norm calls left.",
    in_kernel="the batch-norm calls of one forward of the fused copy, counted by a "
    "TorchFunctionMode beside it",
)
def check_fuse(fuse_for_inference):
    """The fused copy's outputs, modes and batch-norm calls on two specimens, the given model
    left as it was, and the copy's speed. # CHANGED in issue 34: what happened to the given
    model is named from its state (modules replaced, statistics updated by a train-mode
    forward, weights changed) and the copy's mode from which modules stayed in train mode."""
    rng = specimen_rng()
    seed = rng.choice(FUSE_SEEDS)
    model, x, _ = fuse_case("scenario", seed)
    state = copy.deepcopy(model.state_dict())
    want = outputs(model, x, False)
    seen = observe(fused_copy, fuse_for_inference, "scenario", seed)
    said = _given_model(state, seen["state"], seen["not_training"])
    parts = [correct("training model kept", said is None, said or "unchanged, still in train mode")]
    parts.append(_copy_mode(seen["training"], seen.get("top_training", False)))
    gap = differ(seen["output"], want)
    output = at_most(
        "eval output", gap, THRESHOLDS["output_atol"].value, "largest change of the eval output"
    )
    if output.status == "failed":
        output.message += _sibling_cause(model, x, seen["output"])
    parts.append(output)
    parts.append(
        at_most(
            "batch-norm ops left",
            seen["bn_calls"],
            THRESHOLDS["bn_ops_left"].value,
            f"batch-norm calls in one forward (the unfused model makes {batch_norm_calls(model.eval(), x)}; "
            "each conv -> BN pair fused removes one)",
        )
    )
    parts += _small_variance_parts(fuse_for_inference, rng.choice(FUSE_SEEDS))
    if any(p.status == "failed" for p in parts):
        return [*parts, correct("inference speed-up", False, "not measured: fix the fusion first")]
    return [*parts, _fusion_speed(fuse_for_inference)]


def _given_model(before: dict, after: dict, not_training: list) -> str | None:
    """What the learner's function did to the model it was given, from its state_dict before
    and after and the modules it left out of train mode; None if nothing."""
    missing, extra = sorted(set(before) - set(after)), sorted(set(after) - set(before))
    if missing or extra:
        gone = f"{len(missing)} entries gone ({', '.join(missing[:2])})" if missing else ""
        new = f"{len(extra)} new ({', '.join(extra[:2])})" if extra else ""
        return (
            f"the model you were given lost or gained state ({'; '.join(x for x in (gone, new) if x)}): "
            "its modules were replaced in place; fuse a copy (copy.deepcopy) and change only it"
        )
    changed = [
        k
        for k, v in before.items()
        if not (
            isinstance(after[k], torch.Tensor)
            and after[k].shape == v.shape
            and torch.equal(v, after[k])
        )
    ]
    statistics_only = all(k.rsplit(".", 1)[-1] in _BN_STATISTICS for k in changed)
    if changed and statistics_only and any(k.endswith("num_batches_tracked") for k in changed):
        return (
            f"the BatchNorm statistics of the model you were given changed ({', '.join(changed[:2])}"
            "; num_batches_tracked counted a batch): a forward ran on it in train mode. Run "
            "your forwards on the eval-mode copy"
        )
    if changed:
        return (
            f"your function changed the {'BatchNorm statistics' if statistics_only else 'weights'} "
            f"of the model it was given ({', '.join(changed[:2])}): fuse a copy "
            "(copy.deepcopy) and change only it"
        )
    if not_training:
        return (
            f"weights untouched, but the model you were given is left in eval mode "
            f"({', '.join(not_training[:3])}): call .eval() on the copy, not on it"
        )
    return None


_BN_STATISTICS = ("running_mean", "running_var", "num_batches_tracked")


def _copy_mode(training: list, top_training: bool) -> object:
    """The eval-mode part: which of the copy's modules are still in train mode, and whether
    its top module is in train mode too (no .eval() on the copy) or not (a flag set on one).
    A container left in train mode alone (an nn.Sequential: MODELESS) changes nothing."""
    if not training:
        return correct("eval-mode copy", True, "every submodule of the copy is in eval mode")
    some = f"{len(training)} module(s) of the copy are in train mode ({', '.join(training[:3])})"
    if top_training:
        why = f"{some}, the copy itself too: call .eval() on the copy"
    else:
        why = (
            f"{some}, though the copy's top module is in eval mode: call .eval() on the copy, "
            "which sets every submodule (.training = False sets one)"
        )
    return correct("eval-mode copy", False, why)


def _small_variance_parts(fuse_for_inference, seed: int) -> list:
    """The fusion of a model whose channels vary little (running_var 1e-5..1e-4), where
    BatchNorm's eps (1e-5) is a large part of running_var + eps: a fusion that leaves eps out
    passes on scenario_model, not here."""
    model, x, _ = fuse_case("small variance", seed)
    want = outputs(model, x, False)
    seen = observe(fused_copy, fuse_for_inference, "small variance", seed)
    got = seen["output"]
    gap = differ(got, want)
    where = "a conv -> BN model with running variances 1e-5..1e-4"
    output = at_most(
        "eval output, small variances",
        gap,
        THRESHOLDS["output_atol"].value,
        f"largest change of the eval output on {where}",
    )
    if output.status == "failed":
        output.message += _eps_cause(model, x, got)
    left = at_most(
        "batch-norm ops left, small variances",
        seen["bn_calls"],
        THRESHOLDS["small_variance_bn_ops_left"].value,
        f"batch-norm calls in one forward of {where} (its 2 conv -> BN pairs can both fuse)",
    )
    return [output, left]


# the scenario's blocks whose conv and BN are siblings in the module tree but must not fold,
# and why (section 4: a conv folds into a BN only when its output reaches that BN alone)
SIBLINGS = {
    demo.ReluThenBn: "a ReLU sits between the conv and the BN",
    demo.AddThenBn: "the conv's output also goes around the BN, into a sum",
    demo.BnThenConv: "the BN runs before the conv",
}


def _sibling_cause(model: nn.Module, x: torch.Tensor, got: torch.Tensor) -> str:
    """Name the blocks whose conv was folded into a BN it does not feed alone, only when
    folding exactly those (the right folds change no output) reproduces the learner's."""
    blocks = [(n, m) for n, m in model.named_modules() if type(m) in SIBLINGS]
    for k in range(1, 2 ** len(blocks)):
        chosen = [(n, m) for i, (n, m) in enumerate(blocks) if k >> i & 1]
        replay = copy.deepcopy(model).eval()
        for name, _ in chosen:
            block = replay.get_submodule(name)
            block.conv, block.bn = fuse_conv_bn_eval(block.conv, block.bn), nn.Identity()
        with torch.no_grad():
            if differ(replay(x), got) <= THRESHOLDS["output_atol"].value:
                why = "; ".join(f"block {n}: {SIBLINGS[type(m)]}" for n, m in chosen)
                return (
                    f" (your output equals this model's with the conv and BN of {why} folded: "
                    "they are siblings in the module tree, but the conv's output does not reach "
                    "that BN alone; read the pairs from the forward's data flow)"
                )
    return ""


LEFT_OUT = {  # what a fold can leave out of BatchNorm, how to replay it, and what to say
    "eps": (
        lambda bn: setattr(bn, "eps", 0.0),
        "a = gamma / sqrt(running_var + eps), and with variances this small eps = 1e-5 matters",
    ),
    "the running mean": (
        lambda bn: bn.running_mean.zero_(),
        "the folded bias is beta + a * (b - running_mean)",
    ),
}


def _eps_cause(model: nn.Module, x: torch.Tensor, got: torch.Tensor) -> str:
    """Name what the fold left out only when the model with it left out of some of its BNs
    (eps = 0, or the running mean 0) reproduces the output."""
    names = [n for n, m in model.named_modules() if isinstance(m, _BatchNorm)]
    for what, (leave_out, formula) in LEFT_OUT.items():
        for k in range(1, 2 ** len(names)):
            probe = copy.deepcopy(model).eval()
            dropped = [n for i, n in enumerate(names) if k >> i & 1]
            for n in dropped:
                leave_out(probe.get_submodule(n))
            with torch.no_grad():
                if differ(probe(x), got) <= THRESHOLDS["output_atol"].value:
                    return (
                        f" (your output equals this model's with {what} left out of BatchNorm "
                        f"{', '.join(dropped)}: {formula})"
                    )
    return (  # a fold, statistics the copy moved, a BatchNorm run twice: not told apart here
        " (it is not a fold that leaves eps or the running mean out; compare your copy's "
        "output with the given model's in eval mode after each layer to find where they part)"
    )


class _WrongWork(Exception):
    """Raised when a timed sample of the learner's fused net computed other outputs."""


def _judged_speedup(fuse_for_inference, repeats: int = 10, min_sample_s: float = 0.1) -> float:
    """The median ratio of interleaved pairs (the unfused net here / the learner's fused net in
    its kernel), paired as demo.inference_comparison pairs them: 2 warm-up pairs, samples of at
    least `min_sample_s`, the order alternating. Both sides of a pair do the same work
    (pointwise_work, with a seed drawn for that pair), and the fused net's output sums must
    be the unfused net's: the work timed is the work asked."""
    net, x = pointwise_case()
    device = get_device()
    net, x = net.to(device).eval(), x.to(device)
    token, draw = secrets.token_hex(8), secrets.SystemRandom()
    atol = THRESHOLDS["output_atol"].value * x.shape[2] * x.shape[3]  # per pixel, summed

    def pair(number: int, fused_first: bool) -> tuple[float, float]:
        seed = draw.randrange(2**31)

        def base() -> float:
            synchronize(device)
            t0 = time.perf_counter()
            sums = pointwise_work(net, x, seed, number)
            synchronize(device)
            seconds[0] = time.perf_counter() - t0
            return sums

        seconds = [0.0]
        if not fused_first:
            want = base()
        got, took = observe_timed(fused_forwards, fuse_for_inference, token, seed, number)
        if fused_first:
            want = base()
        off = float((got - want).abs().max()) if got.shape == want.shape else float("inf")
        if off > atol * number:
            raise _WrongWork(f"{off / number:.3g}")
        return seconds[0] / number, took / number

    with torch.no_grad(), steady_cpu(1):
        for _ in range(2):
            pair(1, False)
        once = max(pair(1, False)[0], 1e-9)
        number = max(1, int(min_sample_s / once) + 1) if once < min_sample_s else 1
        times = [pair(number, fused_first=i % 2 == 1) for i in range(repeats)]
    return statistics.median(b / f for b, f in times)


def _fusion_speed(fuse_for_inference):
    threshold = THRESHOLDS["fusion_speedup"].value
    name = "inference speed-up"
    what = "fused vs unfused eval forward of a 1x1-conv net (BN is a large share of its time)"
    try:  # fixed repeats, whatever the mode: the threshold was sized on these
        speedup = retry_measure(
            lambda: _judged_speedup(fuse_for_inference), ok=lambda s: s >= threshold
        )
    except _WrongWork as exc:
        return correct(
            name,
            False,
            f"{what}: the timed fused copy's outputs differ from the unfused net's (their "
            f"per-channel sums by {exc} per forward): not timed",
        )
    applies = device_class() != "mps"
    return at_least(
        name,
        speedup,
        threshold,
        what,
        applies=applies,
        reason="fusion speed on Apple GPUs was not measured for this course",
    )
