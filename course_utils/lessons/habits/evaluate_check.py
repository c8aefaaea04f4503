"""Lesson 10's check of exercise 3, 10-evaluate: the colleague's evaluate, fixed. Hooks record
which module types ran in train mode, so a message names only those; a call under no_grad
must leave autograd off; the accuracy must be a Python float over every row. The learner's
evaluate runs in a probe (probes.evaluation); the accuracy it must find is computed here."""

from __future__ import annotations

import copy
import numbers

import torch

from ...checks import at_most, check, correct
from ...probes import observe, specimen_rng
from .probes import eval_case, evaluation
from .reference import reference_evaluate

EVAL_ROWS = 7 * 64 + 13  # 7 batches of 64 and one of 13: batches do not divide
EVAL_SEEDS = (0, 1, 2)  # demo.eval_specimen's seed, drawn per run (the first in a notebook)


@check(
    "10-evaluate",
    points=2,
    hint="Reread section 3: what does each of the two switches change, and which of them "
    "does the colleague's code use, and how? Call your evaluate twice on a model in train "
    "mode and compare: the accuracy, model.training of every submodule, "
    "torch.is_grad_enabled(), and the accuracy over all rows at once.",
    in_kernel="the bytes autograd saved (saved-tensor hooks), the module types that ran in "
    "train mode (forward pre-hooks), the running buffers, autograd's state and every "
    "submodule's mode after each call, read beside the learner's evaluate",
)
def check_evaluate(evaluate) -> list:
    seed = specimen_rng().choice(EVAL_SEEDS)
    model, x, y = eval_case(seed, EVAL_ROWS)
    expected = reference_evaluate(model, x, y, 64)
    seen = observe(evaluation, evaluate, seed, EVAL_ROWS, 64)
    got = seen["accuracy"]
    parts = [
        at_most("nothing saved for backward", seen["saved"], 0, "bytes autograd saved", unit=" B")
    ]
    number = isinstance(got, numbers.Real) and not isinstance(got, bool)
    ok = isinstance(got, numbers.Real | torch.Tensor) and abs(float(got) - expected) < 1e-6
    cause = _train_mode_cause(set(seen["training"]), seen["moved"]) or (
        "" if ok else _accuracy_cause(got, model, x, y, 64)
    )
    said = f"you measured {got!r}, eval mode gives {expected:.4f}{cause}"
    parts.append(correct("accuracy", ok, said))
    kind = getattr(got, "type_name", None) or type(got).__module__ + "." + type(got).__qualname__
    parts.append(
        correct(
            "a Python float",
            number,
            "evaluate returns a Python number"
            if number
            else f"evaluate returns a {kind}, not a Python float: the exercise asks for a float",
        )
    )
    parts.append(_modes_part("mode restored", seen["off_after_train"], training=True))
    parts.append(_modes_part("eval mode kept", seen["off_after_eval"], training=False))
    frozen = seen["frozen"]
    said = f"{len(frozen)} parameters no longer require grad" if frozen else "all still do"
    parts.append(correct("still trainable", not frozen, f"after evaluate: {said}"))
    parts.append(
        correct(
            "autograd left on",
            not seen["grad_changed"],
            "autograd is on after evaluate, as before"
            if not seen["grad_changed"]
            else "after evaluate autograd is OFF for the whole program (torch.is_grad_enabled() "
            "is False): switch it off only inside a `with torch.inference_mode():` block",
        )
    )
    parts.append(
        correct(
            "autograd left off",
            seen["off_kept"],
            "called under torch.no_grad(), autograd is still off after evaluate, as before"
            if seen["off_kept"]
            else "called under torch.no_grad() (autograd off), evaluate returns with autograd "
            "ON: it switched autograd on instead of putting back the state it found",
        )
    )
    return parts


def _train_mode_cause(training: set[str], moved: list[str]) -> str:
    """What ran in train mode, as the hooks and the running buffers confirmed it."""
    said = []
    if "BatchNorm" in training or moved:
        said.append("BatchNorm updated its running statistics from the validation data")
    if "Dropout" in training:
        said.append("Dropout dropped units")
    if not said:
        return ""
    which = " and ".join(said)
    if len(said) == 2:
        return f"; {which}: the model was in train mode (call model.eval())"
    return (
        f"; {which}: it ran in train mode though other submodules were in eval mode "
        "(model.eval() sets every submodule)"
    )


def _accuracy_cause(got, model, x, y, batch_size: int) -> str:
    """Name a batching mistake only when recomputing it reproduces the learner's number."""
    if not isinstance(got, float | int | torch.Tensor):
        return ""
    probe = copy.deepcopy(model).eval()  # this side's own specimen, as the learner's began
    with torch.inference_mode():
        hits = [
            (probe(x[i : i + batch_size]).argmax(1) == y[i : i + batch_size]).float()
            for i in range(0, len(x), batch_size)
        ]
    full = len(x) // batch_size
    mean_of_batches = float(torch.stack([h.mean() for h in hits]).mean())
    dropped_last = float(torch.cat(hits[:full]).mean())
    if abs(float(got) - mean_of_batches) < 1e-6:
        return (
            f"; that is the mean of per-batch accuracies: the last batch holds "
            f"{len(x) - full * batch_size} rows, not {batch_size}: count the hits, divide by len(x)"
        )
    if abs(float(got) - dropped_last) < 1e-6:
        return f"; that is the accuracy without the last, partial batch ({len(x) - full * batch_size} rows)"
    return ""


def _modes_part(name: str, off: list[str], *, training: bool):
    """The mode of every submodule, not only the top one's flag: `off` names those whose mode
    is not `training` after the call ("the model" for the model itself)."""
    want = "train" if training else "eval"
    if not off:
        said = f"a model in {want} mode before evaluate is in {want} mode after, every submodule"
    elif "the model" in off:
        said = f"a model in {want} mode before evaluate is in {'eval' if training else 'train'} mode after (restore the mode it had)"
    else:
        said = (
            f"the model says training={training} but {len(off)} submodule(s) are not in {want} "
            f"mode ({', '.join(off[:3])}): model.train(was) sets every submodule, "
            "model.training = was only the top one"
        )
    return correct(name, not off, said)
