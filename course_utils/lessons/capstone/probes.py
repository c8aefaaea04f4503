"""The capstone's probes: the learner's speed-run, run and watched in the learner's kernel
(course_utils.probes). What they return is data; the check (checks.py) decides with rules.py,
against the held-out labels and a baseline run of its own.

`speedrun_watched` is one timed call: the training split renamed as the check says, the
call's precision, module constructions, weight sources and data reads watched (watch.py), the
test split guarded, its CPU seconds read, and the returned model's predictions on the
held-out images the check sends (in its own order; the labels stay with the check)."""

from __future__ import annotations

import torch
from torch import nn

from ...device import amp_dtype, autocast, get_device, synchronize
from ...measure import steady_cpu
from ...probes import probe, raised
from ...watching import watched_call
from .data_path import decode_all, device_batches
from .recipe import Recipe, grad_scaler, make_model, make_optimizer
from .splits import Relabelled, small_subset, training_set
from .watch import (
    data_reads,
    float32_refused,
    precision_watch,
)

WARM_UP_BATCHES = 3  # the tuned recipe's first batches, untimed, before the first timed call
PREDICT_BATCH = 500  # held-out images per forward of the returned model


def _warm_steps(recipe: Recipe) -> None:
    """WARM_UP_BATCHES steps of the tuned recipe's model, optimizer, data path and precision:
    lazy initialisation, kernel selection and the allocator's first requests, paid here.
    Seeded as `recipe.fit` seeds a run (the warm-up the check ran through it before)."""
    device = get_device()
    torch.manual_seed(0)
    fmt = torch.channels_last if recipe.channels_last else torch.contiguous_format
    model = make_model(recipe).to(device, memory_format=fmt)
    opt = make_optimizer(recipe, model.parameters(), device)
    scaler = grad_scaler(recipe, device)
    part = small_subset(training_set(), WARM_UP_BATCHES, recipe.batch_size)
    x, y = decode_all(part, device)
    for xb, yb in device_batches(x, y, recipe.batch_size, torch.Generator().manual_seed(0)):
        with autocast(device, enabled=recipe.amp, dtype=amp_dtype(device)):
            loss = nn.functional.cross_entropy(model(xb.contiguous(memory_format=fmt)), yb)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    synchronize(device)


@probe
def kernel_warm_up(speedrun, recipe: dict) -> None:
    """The tuned recipe's first steps in the learner's kernel, on one thread, untimed, before
    its first timed call (the check warms up its own baseline where it runs it). No learner
    code runs: `speedrun` only sends this probe to the kernel it lives in. The recipe comes
    from the check as data: the grading kernel has no tuned_recipe (ANSWERS_ELSEWHERE)."""
    with steady_cpu(1):
        _warm_steps(Recipe(**recipe))


def predictions(model: nn.Module, images: torch.Tensor) -> torch.Tensor:
    """The model's top-1 class for each image (normalised float NCHW), in eval mode, without
    autograd; its mode is put back after."""
    device = get_device()
    was_training = model.training
    model.eval()
    with torch.no_grad():
        predicted = torch.cat(
            [
                model(images[i : i + PREDICT_BATCH].to(device)).argmax(1).cpu()
                for i in range(0, len(images), PREDICT_BATCH)
            ]
        )
    model.train(was_training)
    return predicted


@probe
def speedrun_watched(speedrun, shift: int, images: torch.Tensor) -> dict:
    """One call of the learner's speed-run on the training split with its classes renamed by
    `shift` (splits.Relabelled), on one thread, synchronised, watched (see the module
    docstring); the watches start before the clocks (the tensor census costs ~50 ms). A read
    of the test split, raised or caught by the learner's code, ends it: `held_out` names it.
    Then what the check needs: the clocks, what came back and how it was made, and its
    predictions on `images` (or what the model raised; a model that refuses float32 images,
    or is no model, makes none)."""
    dataset = Relabelled(training_set(), shift)
    device = get_device()
    run = watched_call(speedrun, dataset, (precision_watch(), data_reads()), device)
    if run.held_out is not None:
        return {"held_out": run.held_out}
    model, (seen, reads) = run.model, run.watches
    is_module = isinstance(model, nn.Module)
    seen_run = {
        "held_out": None,
        "wall": run.wall,
        "cpu": run.cpu,
        "children_left": run.children_left,
        "model_type": type(model).__name__,
        "is_module": is_module,
        "seen": dict(seen),
        "stale": run.stale,
        "images_read": len(reads.train),
        "raw_reads": dataset.raw_reads + reads.sent,
        "from_before": run.from_before,
        "refused": None,
        "refused_raised": None,
        "predicted": None,
        "predict_raised": None,
    }
    if not is_module:
        return seen_run
    try:
        seen_run["refused"] = float32_refused(model, device)
    except Exception as exc:  # the learner's model, on float32 images
        seen_run["refused_raised"] = raised(exc)
        return seen_run
    if seen_run["refused"] is None:
        try:
            seen_run["predicted"] = predictions(model, images)
        except Exception as exc:  # the learner's model's forward
            seen_run["predict_raised"] = raised(exc)
    return seen_run
