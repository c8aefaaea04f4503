"""Lesson 10's probes: each runs the learner's answer on a specimen it builds from plain
arguments, beside the learner's code, and returns what it saw as data (course_utils.probes).
The checks (checks.py, conversion.py, evaluate_check.py) compute what that data must be on
their own side, and time the learner's loop from there."""

from __future__ import annotations

import contextlib
import dataclasses

import numpy as np
import torch

from ...device import get_device, synchronize
from ...measure import steady_cpu
from ...memory import activation_bytes
from ...probes import probe
from . import demo, loop, spy
from .arrays import shares_memory, specimens, thrown_away_bytes

# --- what both sides build -------------------------------------------------------------------


@contextlib.contextmanager
def one_thread():
    """torch on one CPU thread for the block: the same numbers in every process (the judge's
    and the learner's kernel may have different thread counts, and a few AdamW steps amplify
    the last-bit differences of another reduction order)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def trained(model) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


# --- 10-fast-train ---------------------------------------------------------------------------


def _items(values):
    """A log's losses or accuracies as they were (a list or a tensor), or None."""
    if values is None or isinstance(values, torch.Tensor):
        return values
    return list(values) if isinstance(values, list | tuple) else values


def _kinds(log) -> list[str]:
    """The type names of the log's values that are not Python floats."""
    try:
        values = [*getattr(log, "losses", []), *getattr(log, "val_accuracy", [])]
    except TypeError:  # a field that cannot be iterated: the check says what it is
        return []
    return sorted({type(v).__name__ for v in values if not isinstance(v, float)})


@probe
def diagnosed_run(fast_train, steps: int, every: int, n: int, n_val: int, seed: int) -> dict:
    """The learner's loop on make_data(n, n_val, seed=seed) and a fresh make_model(), under
    the HabitSpy (spy.diagnose), on one thread: its log as data, the spy's counts, and the
    parameters it trained."""
    data = loop.make_data(n=n, n_val=n_val, seed=seed)
    with one_thread():
        log, found = spy.diagnose(fast_train, steps, every, data=data)
    counts = {
        f.name: getattr(found, f.name) for f in dataclasses.fields(found) if f.name != "model"
    }
    return {
        "log": {
            "type": type(log).__name__,
            "losses": _items(getattr(log, "losses", None)),
            "val_accuracy": _items(getattr(log, "val_accuracy", None)),
            "kinds": _kinds(log),
        },
        "counts": {**counts, "syncs": dict(found.syncs)},
        "params": trained(found.model),
    }


@probe
def timed_run(fast_train, steps: int, every: int, seed: int) -> dict:
    """One run of the learner's loop as the check times the others (a fresh model and the
    data set of `seed`, both built inside the run, one thread, its printing swallowed), for
    the check to time from its side; returns the work: the parameters it trained and the
    losses it logged. The check draws `seed` as the run starts, so no earlier run fits."""
    device = get_device()
    with steady_cpu():
        model = loop.make_model().to(device)
        log = loop.quiet(fast_train, model, loop.make_data(seed=seed), steps, device, every)
        synchronize(device)
    return {"params": trained(model), "losses": _items(getattr(log, "losses", None))}


# --- 10-to-tensor ----------------------------------------------------------------------------


@probe
def converted(to_tensor, name: str, seed: int) -> dict:
    """The learner's conversion of one specimen (conversion_specimens.specimens(seed)[name]):
    the tensor, the bytes numpy allocated and freed during the call, and (where memory can be
    shared) whether a write to the array shows in the tensor; or the exception it raised of
    the kinds a conversion raises (ValueError, TypeError, RuntimeError, BufferError)."""
    s = specimens(seed)[name]
    try:
        t, thrown = thrown_away_bytes(
            lambda: to_tensor(s.data) if s.dtype is None else to_tensor(s.data, dtype=s.dtype)
        )
    except NotImplementedError:
        raise  # not attempted yet: the harness says so
    except (ValueError, TypeError, RuntimeError, BufferError) as exc:
        return {
            "raised": type(exc).__name__,
            "message": str(exc).split(". ")[0].rstrip("."),
            "refused": isinstance(exc, ValueError | BufferError),
        }
    shares = s.can_share and isinstance(t, torch.Tensor) and shares_memory(t, np.asarray(s.data))
    return {"tensor": t, "thrown": thrown, "shares": bool(shares)}


# --- 10-evaluate -----------------------------------------------------------------------------


@contextlib.contextmanager
def training_seen(model):
    """The module types (BatchNorm, Dropout) that ran a forward in train mode meanwhile: a
    forward pre-hook on each records module.training, so a message names only those."""
    seen: set[str] = set()
    kinds = {"BatchNorm": torch.nn.modules.batchnorm._BatchNorm, "Dropout": torch.nn.Dropout}

    def hook(kind):
        return lambda module, args: seen.add(kind) if module.training else None

    handles = [
        m.register_forward_pre_hook(hook(kind))
        for m in model.modules()
        for kind, cls in kinds.items()
        if isinstance(m, cls)
    ]
    try:
        yield seen
    finally:
        for h in handles:
            h.remove()


def eval_case(seed: int, rows: int):
    """demo.eval_specimen(seed) (trained on one thread), its validation data cut to `rows`."""
    model, x, y = demo.eval_specimen(seed)
    return model, x[:rows], y[:rows]


def _off(model, training: bool) -> list[str]:
    """The modules (the model itself as "the model") whose mode is not `training`."""
    return [n or "the model" for n, m in model.named_modules() if m.training != training]


@probe
def evaluation(evaluate, seed: int, rows: int, batch_size: int) -> dict:
    """Three calls of the learner's evaluate on eval_case(seed, rows): in train mode (with the
    bytes autograd saved, the module types that ran in train mode, the running buffers it
    moved and autograd's state after), in eval mode, and under torch.no_grad(); the modes
    each call left, and the parameters left frozen. Autograd is put back after each call."""
    model, x, y = eval_case(seed, rows)
    buffers = {k: v.clone() for k, v in model.state_dict().items() if "running" in k}
    result: list = []
    grad_was = torch.is_grad_enabled()
    try:
        with training_seen(model) as training:
            saved = activation_bytes(lambda: result.append(evaluate(model, x, y, batch_size)))
        grad_after = torch.is_grad_enabled()
        torch.set_grad_enabled(grad_was)
        moved = [
            k
            for k, v in model.state_dict().items()
            if k in buffers and not torch.equal(v, buffers[k])
        ]
        after_train = _off(model, True)
        model.eval()
        evaluate(model, x, y, batch_size)
        torch.set_grad_enabled(grad_was)
        after_eval = _off(model, False)
        model.train()
        with torch.no_grad():  # a caller with autograd already off must find it off afterwards
            evaluate(model, x, y, batch_size)
            off_kept = not torch.is_grad_enabled()
    finally:
        torch.set_grad_enabled(grad_was)
    return {
        "accuracy": result[0],
        "saved": saved,
        "training": sorted(training),
        "moved": moved,
        "grad_changed": grad_after != grad_was,
        "off_after_train": after_train,
        "off_after_eval": after_eval,
        "off_kept": off_kept,
        "frozen": [n for n, p in model.named_parameters() if not p.requires_grad],
    }
