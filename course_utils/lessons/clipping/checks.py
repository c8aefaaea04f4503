"""Lesson 08's graded checks: the total gradient norm, a clipped step that trains the
exploding RNN, a threshold read from a norm history, and clipping under a GradScaler."""

from __future__ import annotations

import contextlib
import copy
import math
from unittest import mock

import torch
from torch import nn

from ...checks import Threshold, at_most, check, correct
from ...device import get_device
from . import demo, probes
from .reference import (
    reference_amp_clipped_step,
    reference_clipped_step,
)

THRESHOLDS = {
    "norm_rtol": Threshold(
        1e-4,
        evidence="float32 reductions in another order differ by < 1e-6 relative (CPU, n=40)",
        measured_on=("cpu-bf16",),
    ),
    "trained_fraction": Threshold(
        0.5,
        evidence="final/start loss of the reference at max_norm=1, 150 steps: 0.20, 0.28, 0.18 "
        "(seeds 0-2, torch 2.14, cpu-bf16); clipping by value at 1: 1.28, 2.21, 1.20; unclipped: "
        "diverges (NaN by step 63 and 106 for seeds 0 and 2, loss 10x up for seed 1)",
        measured_on=("cpu-bf16",),
    ),
    "max_norm_low": Threshold(
        0.5,
        evidence="Pascanu et al. 2013 sec. 3.2: half to ten times the average norm converge",
        measured_on=(),
    ),
    "max_norm_high": Threshold(
        10.0, evidence="same source: up to ten times the average norm", measured_on=()
    ),
}


# --- exercise 1: the total norm -------------------------------------------------------------


def _norm_case(seed: int) -> nn.Module:
    """Two trained layers, one frozen (grad None) and one unused this step (grad None)."""
    torch.manual_seed(seed)
    model = nn.ModuleDict(
        {
            "a": nn.Linear(8, 16),
            "b": nn.Linear(16, 4),
            "frozen": nn.Linear(4, 4),
            "unused": nn.Linear(3, 3),
        }
    )
    model["frozen"].requires_grad_(False)
    x = torch.randn(32, 8)
    (model["frozen"](model["b"](model["a"](x).relu())) ** 2).sum().mul(10.0**seed).backward()
    return model


@contextlib.contextmanager
def _no_delegation():
    """The exercise is to compute the norm: the library's own norm functions are off limits."""

    def refuse(*args, **kwargs):
        raise RuntimeError(
            "compute the norm yourself: clip_grad_norm_/get_total_norm are off limits here"
        )

    names = ["clip_grad_norm_", "clip_grad_norm", "get_total_norm"]
    with contextlib.ExitStack() as stack:
        for module in (nn.utils, nn.utils.clip_grad):
            for name in names:
                if hasattr(module, name):
                    stack.enter_context(mock.patch.object(module, name, refuse))
        yield


def _as_float(value) -> float | None:
    if isinstance(value, torch.Tensor) and value.numel() == 1:
        return float(value)
    return float(value) if isinstance(value, int | float) else None


def _right_from_a_list(total_grad_norm, params, norm_type: float, want: float) -> bool:
    """The generator probe: the same parameters passed as a list, which can be read twice."""
    with _no_delegation():
        again = _as_float(total_grad_norm(list(params), norm_type))
    return again is not None and math.isclose(again, want, rel_tol=THRESHOLDS["norm_rtol"].value)


@check(
    "08-total-norm",
    points=2,
    hint="Skip parameters whose .grad is None; take each gradient's norm of order norm_type; "
    "the total is the norm (same order) of those norms. Iterate `parameters` only once.",
)
def check_total_norm(total_grad_norm):
    parts = []
    for seed, norm_type in [(0, 2.0), (1, 1.0), (2, math.inf), (0, 3.0)]:
        model = _norm_case(seed)
        params = list(model.parameters())
        want = float(nn.utils.clip_grad_norm_(params, math.inf, norm_type, foreach=False))
        want_foreach = float(nn.utils.clip_grad_norm_(params, math.inf, norm_type, foreach=True))
        before = [p.grad.clone() for p in params if p.grad is not None]
        with _no_delegation():
            got = _as_float(total_grad_norm(model.parameters(), norm_type))
        after = [p.grad for p in params if p.grad is not None]
        unchanged = all(torch.equal(a, b) for a, b in zip(before, after, strict=True))
        ok = got is not None and math.isclose(got, want, rel_tol=THRESHOLDS["norm_rtol"].value)
        why = "" if ok or got is None else "; " + probes.diagnose_norm(got, model, norm_type)
        if not ok and unchanged and _right_from_a_list(total_grad_norm, params, norm_type, want):
            why = (
                "; given a LIST of the same parameters you return the right norm: your function "
                "reads `parameters` twice, and a generator (model.parameters()) runs out after one"
            )
        if not unchanged:
            ok, why = False, "; but your function CHANGED the gradients: it must only measure"
        parts.append(
            correct(
                f"norm_type={norm_type:g}",
                ok,
                f"you returned {got!r}; clip_grad_norm_ returns {want:.6g} "
                f"(foreach=True: {want_foreach:.6g}){why}",
                value=got,
                threshold=want,
            )
        )
    return parts


# --- exercise 2: a clipped step -------------------------------------------------------------


def _one_step_params(step, model, batches, max_norm: float) -> tuple[list[torch.Tensor], object]:
    """Two steps with an optimizer of two param groups (recurrent weights, the rest), so that
    clipping only the first group shows."""
    model = copy.deepcopy(model)
    params = list(model.parameters())
    optimizer = torch.optim.SGD([{"params": params[:2]}, {"params": params[2:]}], lr=demo.LR)
    norm = None
    for x, y in batches:
        norm = step(model, nn.functional.mse_loss, x, y, optimizer, max_norm)
    return [p.detach().clone() for p in model.parameters()], norm


def _same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return all(torch.allclose(x, y, rtol=1e-4, atol=1e-6) for x, y in zip(a, b, strict=True))


def _which_mistake(got, model, batches, max_norm: float) -> str:
    """Name a mistake only if a step that makes it ends where the learner's did."""
    if _same(got, [p.detach() for p in model.parameters()]):
        return "your steps did not move the parameters: no gradient was left when step() ran"
    for step, said in probes.STEP_MISTAKES.values():
        if _same(got, _one_step_params(step, model, batches, max_norm)[0]):
            return said
    return (
        "parameters differ from a clipped step and from every usual mistake we replayed: "
        "compare your order of calls with Exercise 2"
    )


@check(
    "08-clipped-step",
    points=1,  # one call moved to its place: the least judgement of the four
    hint="zero_grad, forward, backward, THEN nn.utils.clip_grad_norm_(model.parameters(), "
    "max_norm), THEN optimizer.step(); return the norm clip_grad_norm_ returns.",
)
def check_clipped_step(clipped_step):
    model, gen = demo.make_rnn(7), demo.rnn_batches(8)
    batches = [next(gen), next(gen)]
    parts = []
    # max_norm 0.5: the RNN's first gradients have norm ~10, clipping acts; 1000: it must not
    for name, max_norm in [("one step", 0.5), ("norm below max_norm", 1000.0)]:
        want, want_norm = _one_step_params(reference_clipped_step, model, batches, max_norm)
        got, got_norm = _one_step_params(clipped_step, model, batches, max_norm)
        ok = _same(got, want)
        why = "parameters equal the reference after two steps"
        if not ok:
            why = _which_mistake(got, model, batches, max_norm)
        parts.append(correct(name, ok, why))
        if name == "one step":
            g, w = _as_float(got_norm), float(want_norm)
    norm_ok = g is not None and math.isclose(g, w, rel_tol=THRESHOLDS["norm_rtol"].value)
    after = (
        " (the norm AFTER clipping: return what clip_grad_norm_ returns)"
        if g is not None and math.isclose(g, 0.5, rel_tol=1e-3)
        else ""
    )
    parts.append(
        correct(
            "returned norm",
            norm_ok,
            f"you returned {g!r}, the norm before clipping is {w:.4g}{after}",
        )
    )
    if not all(p.status == "passed" for p in parts):
        return [*parts, correct("exploding RNN", False, "not run: fix the step above first")]
    run = demo.train_rnn(clipped_step, 1.0, steps=150, label="yours, max_norm=1")
    fraction = run.final_loss / run.loss[0]
    parts.append(
        at_most(
            "exploding RNN, 150 steps at lr 0.1",
            fraction,
            THRESHOLDS["trained_fraction"].value,
            "final/start loss with your step at max_norm=1 (unclipped, this run diverges)",
        )
    )
    return parts


# --- exercise 3: a threshold from a norm history ------------------------------------------------


@check(
    "08-max-norm",
    points=3,  # the judgement task: which statistic of a skewed history is a threshold
    hint="Describe the typical step, not the rare spikes nor the final inf/NaN: a robust "
    "statistic of the finite norms (median or a moderate quantile), not the mean or the max.",
)
def check_choose_max_norm(choose_max_norm):
    low, high = THRESHOLDS["max_norm_low"].value, THRESHOLDS["max_norm_high"].value
    histories = {
        name: demo.synthetic_history(*args, **demo.SHAPES[name])
        for name, args in demo.HISTORIES.items()
    }
    answers = {name: _as_float(choose_max_norm(list(h))) for name, h in histories.items()}
    named = probes.which_statistic(list(answers.values()), list(histories.values()))
    parts = []
    for name, (_, bulk, *_) in demo.HISTORIES.items():
        got = answers[name]
        ok = got is not None and math.isfinite(got) and low * bulk <= got <= high * bulk
        if got is None or not math.isfinite(got):
            why = "not a finite number: drop inf/NaN before any statistic"
        elif got > high * bulk:
            why = f"more than 10x the typical norm: a threshold among the spikes{named}"
        elif got < low * bulk:
            why = f"below half the typical norm: nearly every step would be clipped{named}"
        else:
            why = "clips the spikes, leaves typical steps alone"
        parts.append(
            correct(
                name,
                ok,
                f"you chose {got!r}; typical norm {bulk:g}, accepted "
                f"{low * bulk:.3g}-{high * bulk:.3g}: {why}",
                value=got,
                threshold=bulk,
            )
        )
    return parts


# --- exercise 4: clipping under a GradScaler ------------------------------------------------


_NO_UPDATE = ("unscale_() is being called after step()", "step() has already been called")


def _amp_run(step, blow_up: bool):
    """Two steps of `step` on a fresh AMP problem, the second with inf gradients if `blow_up`;
    the optimizer has two param groups, so that clipping only the first shows. Returns the
    parameters after each step, the norms returned, the final scale and, if PyTorch refused
    the second step because update() was never called, its words."""
    model, optimizer, scaler, x, y = demo.amp_problem(get_device())
    params = list(model.parameters())
    optimizer = torch.optim.SGD(
        [{"params": params[:2]}, {"params": params[2:]}], **optimizer.defaults
    )
    norms = [step(model, nn.functional.mse_loss, x, y, optimizer, scaler, 1.0)]
    first = [p.detach().clone() for p in model.parameters()]
    if blow_up:
        x = x.clone()
        x[0, 0] = 3e38  # overflows in the forward: the gradients are inf/NaN
    refused = None
    try:
        norms.append(step(model, nn.functional.mse_loss, x, y, optimizer, scaler, 1.0))
    except RuntimeError as exc:
        if not any(words in str(exc) for words in _NO_UPDATE):
            raise
        refused = str(exc).splitlines()[0]
    return (
        first,
        [p.detach().clone() for p in model.parameters()],
        norms,
        scaler.get_scale(),
        refused,
    )


@check(
    "08-amp-clip",
    points=2,
    hint="scaler.scale(loss).backward(); scaler.unscale_(optimizer); clip_grad_norm_ with the "
    "same max_norm; scaler.step(optimizer) (it skips inf steps); scaler.update(); return the "
    "norm tensor without .item().",
)
def check_amp_clipped_step(amp_clipped_step):
    want1, want2, want_norms, want_scale, _ = _amp_run(reference_amp_clipped_step, blow_up=True)
    got1, got2, got_norms, got_scale, refused = _amp_run(amp_clipped_step, blow_up=True)
    g, w = _as_float(got_norms[0]), float(want_norms[0])
    parts = [correct("normal step", _same(got1, want1), _amp_step_why(got1, want1, g, w))]
    finite = all(torch.isfinite(p).all() for p in got2)
    skipped = finite and _same(got2, got1)
    if refused:
        why = (
            "PyTorch refused your second step: scaler.update() was never called after "
            "scaler.step(optimizer); call it at the end of every step"
        )
    elif not skipped:
        why = "the inf/NaN step changed the parameters: step through scaler.step(optimizer)"
    elif got_scale != want_scale:
        why = (
            f"scale {got_scale:g} after an inf step, expected {want_scale:g}: call scaler.update()"
        )
    else:
        why = "skipped, and the scale was lowered"
    parts.append(
        correct("step with inf gradients", not refused and skipped and got_scale == want_scale, why)
    )
    norm = got_norms[0]
    is_tensor = isinstance(norm, torch.Tensor)
    if g is not None and not math.isclose(g, w, rel_tol=1e-3):
        what = f"you returned {g:.4g}, the norm of the unscaled gradients is {w:.4g}"
        what += " (the norm of the scaled gradients?)" if g > 1e3 * w else ""
        what += " (the norm AFTER clipping)" if math.isclose(g, 1.0, rel_tol=1e-3) else ""
    elif not is_tensor:
        what = (
            f"you returned a {type(norm).__name__}: .item() each step waits for the device "
            "(a host-device sync); return the tensor, read it when you log"
        )
    else:
        what = "the unscaled norm, as a tensor"
    parts.append(
        correct(
            "returned norm", is_tensor and g is not None and math.isclose(g, w, rel_tol=1e-3), what
        )
    )
    return parts


def _amp_step_why(got1, want1, g: float | None, w: float) -> str:
    """What the first step's parameters say, a cause named only where a replayed step (and the
    returned norm) confirms it."""
    if _same(got1, want1):
        return "the step equals unscale_ -> clip -> scaler.step"
    if _same(got1, _amp_run(probes.no_unscale_amp_step, blow_up=False)[0]):
        # clipping the scaled gradients and unscaling twice end in the same parameters; the
        # norm you return tells them apart
        if g is not None and math.isclose(g, w, rel_tol=1e-3):
            return (
                "the step equals clipping, then unscaling AGAIN: you unscaled by hand and "
                "scaler.step unscaled a second time (it does so unless scaler.unscale_(optimizer) "
                "was called): use scaler.unscale_(optimizer)"
            )
        return "you clipped the SCALED gradients (x65536): call scaler.unscale_(optimizer) first"
    if _same(got1, _amp_run(probes.fp32_amp_step, blow_up=False)[0]):
        return (
            "the step equals the right one computed in float32: your forward did not run under "
            "torch.autocast(x.device.type, dtype=cu.amp_dtype(x.device)) on this device"
        )
    return (
        "parameters differ from unscale_ -> clip -> scaler.step -> update and from the usual "
        "mistakes we replayed: compare with Exercise 4"
    )
