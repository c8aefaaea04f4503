"""Lesson 05's checks: a bucketing loader that keeps the number of batch shapes and the
padding both small, and a channels_last conversion whose layout survives the network."""

from __future__ import annotations

import itertools

import torch
from torch import nn

from ...checks import (
    Threshold,
    at_least,
    at_most,
    check,
    correct,
    not_applicable,
    retry_measure,
)
from ...device import channels_last_pays, device_class, get_device
from ...guards import _as_learner
from ...measure import compare, steady_cpu
from . import demo, layout
from .reference import ReferenceSqueezeExcite

THRESHOLDS = {
    "max_shapes": Threshold(
        40,
        "distinct (B, 3, H, W) batches over the lesson's 2048 images, batch 16 (deterministic, "
        "torch 2.14): 16-px buckets 36, 20-px 29, sorted by 8-px bucket then cut 38; no "
        "bucketing (each batch padded to its own max) 119 shuffled, 122 sorted by size; "
        "12-px buckets 51, 8-px 90",
        measured_on=("cpu-bf16",),
    ),
    "max_padding": Threshold(
        0.5,
        "padded / real pixels - 1, same data: 16-px buckets 0.37, 20-px 0.49, sorted by 16-px "
        "bucket then cut 0.42; pad to the global max 6.1; round up to 16 px without grouping "
        "3.0; sorted by (h, w), rounded up to 16 px 0.68; 24-px buckets 0.60",
        measured_on=("cpu-bf16",),
    ),
    "autotune_speedup": Threshold(
        1.5,
        "first epoch with cudnn.benchmark, no bucketing / your bucketing, fresh autotuning cache "
        "(CUDA only). Reasoning, not a measurement: no bucketing makes 122 distinct shapes "
        "against 36 for 16-px buckets, each autotuned once (3.4x the tuning runs), at 0.37 vs "
        "0.28 padding, so the first epoch should be well over 1.5x slower without bucketing. "
        "The check passed once on an H200 in quick mode (2026-11-29, torch 2.11, "
        "docs/results/cuda-tensorcore-nvidia-h200-pytest.md), its value not recorded; never "
        "run on a T4. Calibrate with a CUDA run that records the value",
        measured_on=(),
    ),
    "output_error": Threshold(
        1e-4,
        "max |output - legacy NCHW output| in fp32 on the CPU, whole SENet and one SE gate "
        "alone: 3e-8 and 1e-6 when correct (summation order); a max-pooled gate differs by "
        "2.1 (the whole net damps it to 5e-5, hence the gate alone) (cpu-bf16, deterministic)",
        measured_on=("cpu-bf16",),
    ),
    "cl_speedup": Threshold(
        1.05,
        "SENet width 16, batch 32, 32x32, forward+backward, one thread, NCHW / channels_last "
        "(reference gate), interleaved median of 6 pairs, cpu-bf16, torch 2.14, 2 cores shared: "
        "1.18-1.40 (n=16, load 12-14); the legacy gate 1.07-1.45 (n=4); not calibrated on "
        "other classes, so graded on cpu-bf16 only",
        measured_on=("cpu-bf16",),
    ),
}
HINTS = {
    "bucketing": "Reread section 2: a batch's shape is set by the size it is padded to, and "
    "padding is the price of sharing a shape. Ask which images share a batch and to what size "
    "each batch is padded; lesson.strategy_table measures both numbers for your pair.",
    "break_even": "Reread Exercise 3: write down the seconds each run spends over run_steps "
    "steps, eager and compiled, from the fields of timing (which of them is a one-off cost, and "
    "what else did the first call do?), and how often that cost is paid with `compiles`.",
    "channels_last": "Reread section 3 and the tracer's output: find the line of the gate that "
    "returns a tensor in another memory order, and compute the same gate with operations that "
    "read any layout. Both the model and its input must be converted.",
}
_run = _as_learner(lambda fn, *args: fn(*args))  # the learner's classes run as learner code


# --- exercise 1: bucketing ------------------------------------------------------------------


def _shape_cause(s: demo.LoaderStats) -> str:
    if s.padding_overhead <= THRESHOLDS["max_padding"].value:
        return (
            "batches are padded to their own largest image, so almost every batch has a new "
            "shape: pad up to a bucket edge instead (and group by that bucket)"
        )
    return "batches mix sizes and are padded to their own maximum: group by size bucket and pad to the bucket"


def _padding_cause(s: demo.LoaderStats) -> str:
    if s.distinct_shapes <= 2:
        return "everything is padded to one global size, so most of the work is on padding"
    return (
        "small and large images share batches (or the buckets are too coarse): group indices "
        "by the same rounded size that pad_collate pads to"
    )


def _learner_batches(bucket_batches, sizes) -> list[list[int]]:
    batches = bucket_batches(sizes, demo.BATCH)
    return [[int(i) for i in b] for b in batches]


@check("05-bucketing", points=3, hint=HINTS["bucketing"])
def check_bucketing(bucket_batches, pad_collate):
    images = demo.variable_size_images()
    sizes = demo.image_sizes()
    batches = _learner_batches(bucket_batches, sizes)
    stats = demo.loader_stats(batches, pad_collate, images)
    intact = not stats.problems
    parts = [
        correct(
            "every sample, once, intact",
            intact,
            f"all {len(images)} images reach the model once, uncropped"
            if intact
            else "; ".join(stats.problems[:2]),
        )
    ]
    if stats.largest_batch > demo.BATCH:
        parts.append(
            correct(
                "batch size",
                False,
                f"a batch holds {stats.largest_batch} samples; at most {demo.BATCH} (batch_size) allowed",
            )
        )
    shapes = at_most(
        "distinct batch shapes",
        stats.distinct_shapes,
        THRESHOLDS["max_shapes"].value,
        f"shapes reaching the model over {stats.batches} batches (each one autotuned by cuDNN, or recompiled by torch.compile)",
    )
    padding = at_most(
        "padding overhead",
        100 * stats.padding_overhead,
        100 * THRESHOLDS["max_padding"].value,
        "extra pixels computed on, as % of the real ones",
        unit="%",
    )
    if shapes.status == "failed":
        shapes.message += f": {_shape_cause(stats)}"
    if padding.status == "failed":
        padding.message += f": {_padding_cause(stats)}"
    parts += [shapes, padding]
    parts.append(
        _autotune_part(batches, pad_collate, images, ok=all(p.status == "passed" for p in parts))
    )
    return parts


_widths = itertools.count(24)  # each timed epoch gets a network width no earlier run used


def _autotune_part(batches, pad_collate, images, ok: bool):
    """CUDA only: the first epoch with cudnn.benchmark, no bucketing vs the learner's."""
    name, limit = "first epoch with cudnn.benchmark", THRESHOLDS["autotune_speedup"].value
    if get_device().type != "cuda":
        return not_applicable(
            name,
            f"no cuDNN on a {device_class()} device: there is no autotuning to time (the shape and padding counts above hold everywhere)",
        )
    if not ok:
        return not_applicable(name, "not timed: the loader above does not pass yet")
    base_batches = demo.sorted_batches([tuple(im.shape[1:]) for im in images], demo.BATCH)

    def ratio() -> float:
        slow = demo.first_epoch_s(base_batches, demo.pad_to_batch_max, images, width=next(_widths))
        fast = demo.first_epoch_s(batches, pad_collate, images, width=next(_widths))
        return slow / fast

    value = retry_measure(ratio, ok=lambda r: r >= limit)
    return at_least(
        name, value, limit, "first-epoch time, no bucketing / yours (fresh autotuning cache)"
    )


# --- exercise 2: channels_last ----------------------------------------------------------------


def _plain(fn, *args):
    return fn(*args)


@check("05-channels-last", points=2, hint=HINTS["channels_last"])
def check_channels_last(to_channels_last, squeeze_excite):
    # the lesson's own class runs as the reference; the learner's (or a subclass) as learner code
    run = _plain if squeeze_excite is ReferenceSqueezeExcite else _run
    legacy, mine = layout.make_pair(squeeze_excite)
    x = layout.images()
    with torch.no_grad():
        want = legacy(x)
    model, xl = to_channels_last(mine, x.clone())
    if not isinstance(model, nn.Module) or not isinstance(xl, torch.Tensor):
        got = f"({type(model).__name__}, {type(xl).__name__})"
        return [correct("returns", False, f"expected (model, x), got {got}")]
    weights = layout.nchw_weights(model)
    same_shape = xl.shape == x.shape
    why = (
        f"the input you return has shape {tuple(xl.shape)}, not {tuple(x.shape)}: channels_last "
        "changes the strides, not the shape (x.permute(0, 2, 3, 1) makes an NHWC-shaped tensor "
        "that a conv cannot read)"
        if not same_shape
        else "the input you return is NCHW: convert it too, x.to(memory_format=torch.channels_last)"
    )
    parts = [
        correct(
            "model weights",
            not weights,
            "every conv weight is channels_last"
            if not weights
            else f"{len(weights)} conv weights are still NCHW (first: {weights[0]}): convert the "
            "model, model.to(memory_format=torch.channels_last); a conv given one of each "
            "converts on every call",
        ),
        correct(
            "input",
            same_shape and layout.is_cl(xl),
            "the input is channels_last, same shape" if same_shape and layout.is_cl(xl) else why,
        ),
    ]
    if not same_shape:
        return parts
    losses = run(layout.layout_trace, model, xl)
    parts.append(
        correct(
            "layout through the network",
            not losses,
            "every layer's output stays channels_last"
            if not losses
            else f"{losses[0]}: a .contiguous() (or a view/permute that needs one) converts back "
            "to NCHW; compute the gate without it",
        )
    )
    with torch.no_grad():
        err = max(
            (run(model, xl).float() - want).abs().max().item(),
            layout.gate_error(squeeze_excite, run),
        )
    parts.append(
        at_most(
            "same output",
            err,
            THRESHOLDS["output_error"].value,
            "max |output - legacy output| (whole network, and one SE gate alone)",
        )
    )
    if any(p.status == "failed" for p in parts):
        return parts + [not_applicable("speed", "not measured: fix the parts above first")]
    return parts + [_cl_speed(legacy, model, x, xl, run)]


def _cl_speed(legacy: nn.Module, model: nn.Module, x: torch.Tensor, xl: torch.Tensor, run):
    """NCHW legacy model vs the learner's channels_last one, one CPU training step each."""
    cls, limit, name = device_class(), THRESHOLDS["cl_speedup"].value, "speed (fp32 training step)"
    if get_device().type != "cpu":
        return not_applicable(
            name,
            f"on {cls} channels_last pays with AMP and a larger model than this check can afford; "
            "the notebook's demo measures it there",
        )
    legacy.train()
    model.train()
    step = layout.train_step(model, xl)
    slow, fast = layout.train_step(legacy, x), lambda: run(step)
    with steady_cpu(1):
        value = retry_measure(
            lambda: compare(slow, fast, repeats=6, warmup=2).speedup, ok=lambda r: r >= limit
        )
    return at_least(
        name,
        value,
        limit,
        "NCHW step time / channels_last step time",
        applies=channels_last_pays(cls),
        reason=f"channels_last is not known to pay on {cls} (cu.device.CHANNELS_LAST, the table "
        "the capstone follows too): the effect is reported, not graded",
    )
