"""Lesson 17's checks of exercises 1 and 2 (a colleague's Triton kernels, fixed by the learner),
and the lesson's THRESHOLDS (thresholds.py). Exercise 3's check is in traffic_check.py.

The truth is computed here, in the judge under `course grade`: torch.softmax and SDPA on the
same inputs the probe builds (specimens.py). A message names a cause only where the learner's
output equals, within the limit, the replay of that mistake in plain torch (replay.py)."""

from __future__ import annotations

import torch

from ...checks import Part, check, correct, not_applicable
from ...probes import observe, specimen_rng
from .attention import sdpa
from .probes import attention_outputs, softmax_outputs
from .replay import (
    attention_over,
    key_loops,
    packed_rows_softmax,
    padded_softmax,
    tiled_attention,
    unshifted_softmax,
)
from .runtime import NO_TRITON, have_triton
from .specimens import FLASH_CASES, SOFTMAX_CASES, drawn, flash_inputs, softmax_input
from .thresholds import THRESHOLDS

SEEDS = (0, 1, 2, 3, 4, 5, 6, 7)
TILES = (16, 32, 64, 128)  # key tiles a replay of exercise 2's mistakes tries


def _error(got, truth: torch.Tensor, what: str) -> float:
    """max |got - truth|, inf where either is not finite; TypeError for another shape."""
    if not isinstance(got, torch.Tensor) or tuple(got.shape) != tuple(truth.shape):
        shape = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
        raise TypeError(f"{what} returned {shape} where {tuple(truth.shape)} was expected")
    diff = (got.double() - truth.double()).abs()
    return float(torch.nan_to_num(diff, nan=float("inf")).max())


def _power_of_two(n: int) -> bool:
    return (n & (n - 1)) == 0


def _same(got: torch.Tensor, replay: torch.Tensor, atol: float) -> bool:
    both_nan = torch.isnan(got) & torch.isnan(replay)
    close = (got.double() - replay.double()).abs() <= atol
    return bool((both_nan | close).all())


@check(
    "17-fused-softmax",
    points=2,
    hint="Which lanes of a program's block lie past the end of its row, and what do they "
    "add to the row's max and sum? Compare your kernel with torch.softmax on rows whose "
    "length is not a power of two, and on rows of negative numbers.",
)
def check_fused_softmax(softmax) -> list[Part]:
    if not have_triton():
        return [not_applicable("Triton", NO_TRITON)]
    rng = specimen_rng()
    cases, seed = drawn(SOFTMAX_CASES, rng), rng.choice(SEEDS)
    got = observe(softmax_outputs, softmax, cases, seed)
    atol = THRESHOLDS["softmax_atol"].value
    errors, truths = {}, {}
    for name, case in cases.items():
        truths[name] = torch.softmax(softmax_input(case, seed).double(), dim=1)
        errors[name] = _error(got.get(name), truths[name], f"softmax on '{name}'")
    power_passed = [n for n, c in cases.items() if _power_of_two(c["cols"]) and errors[n] <= atol]
    parts = []
    for name, case in cases.items():
        said = f"max |yours - torch.softmax| = {errors[name]:.3g} on {case['rows']} rows of {case['cols']}"
        if errors[name] <= atol:
            parts.append(
                correct(name, True, said, value=errors[name], threshold=atol, better="lower")
            )
            continue
        x = softmax_input(case, seed)
        if _same(got[name], padded_softmax(x), atol):
            said += (
                ". Your rows are exactly what lanes past the row's end loaded as 0.0 give: the "
                "padded lanes take part in the max and the sum"
            )
        elif _same(got[name], unshifted_softmax(x), atol):
            said += (
                ". Your rows are exactly an exp without the row's max subtracted (or with a "
                "padded 0 taken as the max): exp overflows above about 88 and underflows to 0 "
                "below about -87"
            )
        elif x.stride(0) != x.shape[1] and _same(got[name], packed_rows_softmax(x), atol):
            said += (
                f". Your rows are exactly what reading row i at i * {x.shape[1]} gives: this x "
                f"is a slice of a wider tensor, so its rows start x.stride(0) = {x.stride(0)} "
                "apart; pass the stride to the kernel"
            )
        elif rows := _rows_right(got.get(name), truths[name], atol):
            said += rows
        else:
            said += ". Reread section 3: what each lane loads, and where each result is stored"
        if power_passed:
            said += f" (rows of a power-of-two length passed: {', '.join(power_passed)})"
        parts.append(correct(name, False, said, value=errors[name], threshold=atol, better="lower"))
    return parts


def _rows_right(got, truth: torch.Tensor, atol: float) -> str:
    """Which rows of a softmax are right, where some are and some are not."""
    if not isinstance(got, torch.Tensor) or got.shape != truth.shape:
        return ""
    right = ((got.double() - truth).abs() <= atol).all(-1)
    if bool(right.all()) or not bool(right.any()):
        return ""
    said = f"; right on {int(right.sum())} of {right.numel()} rows"
    if int(right.sum()) == 1 and bool(right[0]):
        said += (
            ": only row 0 is right. Does the grid launch one program per row, and does each "
            "program read program_id on the axis the grid runs along, and its row's offset?"
        )
    return said


def _causes(got: torch.Tensor, q, k, v) -> list[str]:
    """The mistakes whose replay gives the learner's output, over the key tiles of TILES."""
    mistakes = {
        "the accumulator is not rescaled when the running max grows (acc, not acc * alpha)":
            {"rescale_acc": False},
        "the running sum is not rescaled when the running max grows (l_i, not l_i * alpha)":
            {"rescale_sum": False},
        "neither the accumulator nor the running sum is rescaled when the running max grows":
            {"rescale_acc": False, "rescale_sum": False},
        "the scores are not scaled by 1/sqrt(head dim)": {"scaled": False},
        "no causal mask: each query also attends to the keys after it": {"causal": False},
    }  # fmt: skip
    atol = THRESHOLDS["flash_atol"].value
    found = [
        cause
        for cause, flags in mistakes.items()
        if any(_same(got, tiled_attention(q, k, v, n, **flags), atol) for n in TILES)
    ]
    loops = key_loops(q.shape[-2], TILES)
    found += [
        cause for cause, keep in loops.items() if _same(got, attention_over(q, k, v, keep), atol)
    ]
    return found


def _where(got, truth: torch.Tensor, atol: float) -> str:
    """Which (batch, head) slices of the output are right, where some are and some are not."""
    if not isinstance(got, torch.Tensor) or got.shape != truth.shape:
        return ""
    right = ((got.double() - truth).abs() <= atol).flatten(2).all(-1)  # (B, H)
    if bool(right.all()) or not bool(right.any()):
        return ""
    wrong = [(b, h) for b, h in zip(*torch.nonzero(~right, as_tuple=True), strict=True)]
    shown = ", ".join(f"({b}, {h})" for b, h in wrong[:4]) + (" ..." if len(wrong) > 4 else "")
    batches = sorted({int(b) for b, _ in wrong})
    said = (
        f"; right on {int(right.sum())} of {right.numel()} (batch, head) slices, wrong on {shown}"
    )
    if bool(right[0].all()) and batches == list(range(1, right.shape[0])):
        said += ": only batch 0 is right. Does your grid (program_id) and its offsets reach every batch?"
    return said


@check(
    "17-flash-forward",
    points=3,
    hint="Follow one query through the loop: when a tile brings a score above every score "
    "before it, in what units are the sum and the accumulator of the earlier tiles, and in "
    "what units are the new tile's terms? Test with scores that grow along the keys.",
)
def check_flash_forward(attention) -> list[Part]:
    if not have_triton():
        return [not_applicable("Triton", NO_TRITON)]
    rng = specimen_rng()
    cases, seed = drawn(FLASH_CASES, rng), rng.choice(SEEDS)
    got = observe(attention_outputs, attention, cases, seed)
    atol = THRESHOLDS["flash_atol"].value
    errors, inputs, truths = {}, {}, {}
    for name, case in cases.items():
        inputs[name] = flash_inputs(case, seed)
        truths[name] = sdpa(*(t.double() for t in inputs[name]))
        errors[name] = _error(got.get(name), truths[name], f"attention on '{name}'")
    first_passed = [n for n, c in cases.items() if c["kind"] == "first" and errors[n] <= atol]
    parts = []
    for name, case in cases.items():
        shape = "x".join(str(case[d]) for d in "BHTD")
        said = f"max |yours - SDPA (causal)| = {errors[name]:.3g} on q, k, v of {shape}"
        if errors[name] <= atol:
            parts.append(
                correct(name, True, said, value=errors[name], threshold=atol, better="lower")
            )
            continue
        causes = _causes(got[name], *inputs[name])
        others_pass = all(errors[n] <= atol for n in cases if n != name)
        if len(causes) == 1:
            said += f". Your output is exactly what this mistake gives: {causes[0]}"
        elif causes:
            said += ". Your output is what each of these mistakes gives: " + "; or ".join(causes)
        elif case.get("layout") and others_pass:
            said += (
                ". Right on every contiguous q, k, v, wrong on these views of (B, T, H, D) "
                f"tensors (q.stride() = {tuple(inputs[name][0].stride())}): your kernel reads "
                "a layout these strides do not have; pass the strides or call .contiguous()"
            )
        elif where := _where(got.get(name), truths[name], atol):
            said += where
        else:  # not a mistake a replay told apart: say what was compared
            said += (
                ". It matches none of the mistakes replayed here (a running quantity not "
                "rescaled, scores not scaled, no causal mask): compare your output with SDPA's "
                "query by query on a small input"
            )
        if first_passed:
            said += " (right where each query's largest score sits in its first keys)"
        parts.append(correct(name, False, said, value=errors[name], threshold=atol, better="lower"))
    return parts
