"""Lesson 18's probes: the learner's speed-run and recipe, run beside the learner's code
(course_utils.probes). They return data; the checks (checks.py, rules.py) decide.

`speedrun_watched` is one timed call: the training text under the cipher the check names, the
call's module constructions, weight sources, documents read and token slots trained watched, the
validation text guarded, its CPU seconds read, then the returned model's loss on the validation
documents the check sends, under each cipher it names (the check compares them)."""

from __future__ import annotations

import contextlib
from dataclasses import asdict

import torch
import torch.nn.functional as F
from torch import nn

from ...device import amp_dtype, autocast, get_device, synchronize
from ...measure import steady_cpu
from ...probes import probe, raised
from ...watching import watched_call
from .model import lm_loss
from .recipe import Recipe, batches, make_model, make_optimizer, rate
from .text import IGNORE, TrainText, cipher

WARM_UP_STEPS = 3


@contextlib.contextmanager
def slots_trained():
    """Counts the target slots of every cross-entropy computed with autograd on (a training
    loss): {"slots": n, "real": n that carry loss}. torch's function patched, then put back."""
    seen = {"slots": 0, "real": 0}
    original = F.cross_entropy

    def counted(input, target, *args, **kwargs):
        if torch.is_grad_enabled() and input.requires_grad:
            seen["slots"] += target.numel()
            ignore = kwargs.get("ignore_index", IGNORE)
            seen["real"] += int((target != ignore).sum())
        return original(input, target, *args, **kwargs)

    F.cross_entropy = counted
    try:
        yield seen
    finally:
        F.cross_entropy = original


def validation_nll(model: nn.Module, docs: list[torch.Tensor], key: int) -> tuple[float, int]:
    """(sum of the model's cross-entropy over each validation document, alone in its row, read
    under cipher `key`; the number of targets). Eval mode, no autograd, fp32 logits."""
    device, table = get_device(), cipher(key)
    was_training = model.training
    model.eval()
    total, n = 0.0, 0
    with torch.no_grad():
        for doc in docs:
            d = table[doc].to(device)
            logits = model(d[None, :-1])[0].float()
            total += float(F.cross_entropy(logits, d[1:], reduction="sum"))
            n += len(d) - 1
    model.train(was_training)
    return total, n


@probe
def recipe_of(my_recipe) -> dict:
    """The learner's recipe for this device, as plain data (the judge rebuilds it)."""
    recipe = my_recipe(get_device())
    if not isinstance(recipe, Recipe):
        return {"not_a_recipe": type(recipe).__name__}
    return asdict(recipe)


@probe
def prediction_of(biggest_lever) -> str:
    """The lever the learner predicts buys the most (a name; anything else as its repr);
    lesson.measure refuses meanwhile (ablate.PREDICTING)."""
    from .ablate import PREDICTING

    PREDICTING.append(True)
    try:
        answer = biggest_lever()
    finally:
        PREDICTING.clear()
    return answer if isinstance(answer, str) else repr(answer)


@probe
def kernel_warm_up(speedrun, fields: dict) -> None:
    """WARM_UP_STEPS untimed steps of the learner's recipe in its kernel before its first timed
    call: lazy initialisation, first kernels, the allocator's first requests. No learner code
    runs (`speedrun` only sends the probe to its kernel). Written out, not `fit`: the grading
    kernel has no `fit` (an answer under another name)."""
    recipe, device = Recipe(**fields), get_device()
    with steady_cpu(1):
        torch.manual_seed(0)
        model = make_model(recipe, device)
        opt = make_optimizer(recipe, model.parameters(), device)
        data = batches(recipe, TrainText(0), torch.Generator().manual_seed(0))
        for step in range(WARM_UP_STEPS):
            for g in opt.param_groups:
                g["lr"] = rate(recipe, step)
            tokens, targets = (t.to(device) for t in next(data))
            with autocast(device, enabled=recipe.amp, dtype=amp_dtype(device)):
                loss = lm_loss(model(tokens), targets)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
        synchronize(device)


@probe
def speedrun_watched(speedrun, key: int, val_docs: list, score_keys: list) -> dict:
    """One call of the learner's speed-run on the training text under cipher `key`, on one
    thread, synchronised, watched. A read of the validation text (raised or caught by the
    learner's code) ends it. Then the clocks, what came back, how it was made, and its
    validation loss under each of `score_keys` (or what the model raised)."""
    text = TrainText(key)
    run = watched_call(speedrun, text, (slots_trained(),))
    if run.held_out is not None:
        return {"held_out": run.held_out}
    model, (slots,) = run.model, run.watches
    is_module = isinstance(model, nn.Module)
    out = {
        "held_out": None,
        "wall": run.wall,
        "cpu": run.cpu,
        "children_left": run.children_left,
        "model_type": type(model).__name__,
        "is_module": is_module,
        "stale": run.stale,
        "from_before": run.from_before,
        "docs_read": len(text.reads),
        "slots": dict(slots),
        "nll": None,
        "nll_raised": None,
    }
    if is_module:
        try:
            out["nll"] = {k: validation_nll(model, val_docs, k) for k in score_keys}
        except Exception as exc:  # the learner's model's forward
            out["nll_raised"] = raised(exc)
    return out
