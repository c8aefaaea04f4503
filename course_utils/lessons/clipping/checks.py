"""Lesson 08's graded checks: the total gradient norm, a clipped step that trains the
exploding RNN, a threshold read from a norm history, and clipping under a GradScaler."""

from __future__ import annotations

import contextlib
import copy
import math
import random
from unittest import mock

import torch
from torch import nn

from ...checks import Threshold, at_most, check, correct
from ...device import amp_dtype, get_device
from . import demo
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


def _diagnose_norm(got: float, model: nn.Module, norm_type: float) -> str:
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    per_tensor = [float(torch.linalg.vector_norm(g, norm_type)) for g in grads]
    two = float(torch.linalg.vector_norm(torch.cat([g.flatten() for g in grads]), 2.0))
    if got == 0.0:
        return "you returned 0: was `parameters` (a generator) used up by a first loop?"
    if math.isclose(got, sum(per_tensor), rel_tol=1e-4):
        return (
            "that is the SUM of the per-tensor norms; the total is the norm of the vector of norms"
        )
    if math.isinf(norm_type) and math.isclose(got, two, rel_tol=1e-4):
        return "that is the 2-norm; for norm_type=inf the total is the largest |gradient| entry"
    if math.isclose(got, two, rel_tol=1e-4):
        return "that is the 2-norm: use norm_type for every tensor and for the norm of norms"
    return "it matches no usual mistake: print the per-tensor norms and compare"


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
        why = "" if ok or got is None else "; " + _diagnose_norm(got, model, norm_type)
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
    model = copy.deepcopy(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=demo.LR)
    norm = None
    for x, y in batches:
        norm = step(model, nn.functional.mse_loss, x, y, optimizer, max_norm)
    return [p.detach().clone() for p in model.parameters()], norm


def _same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return all(torch.allclose(x, y, rtol=1e-4, atol=1e-6) for x, y in zip(a, b, strict=True))


@check(
    "08-clipped-step",
    points=2,
    hint="zero_grad, forward, backward, THEN nn.utils.clip_grad_norm_(model.parameters(), "
    "max_norm), THEN optimizer.step(); return the norm clip_grad_norm_ returns.",
)
def check_clipped_step(clipped_step):
    model, gen = demo.make_rnn(7), demo.rnn_batches(8)
    batches = [next(gen), next(gen)]
    max_norm = 0.5  # the RNN's first gradients have norm ~10: clipping is active
    want, want_norm = _one_step_params(reference_clipped_step, model, batches, max_norm)
    got, got_norm = _one_step_params(clipped_step, model, batches, max_norm)
    unclipped, _ = _one_step_params(demo.unclipped_step, model, batches, max_norm)
    by_value, _ = _one_step_params(demo.by_value_step, model, batches, max_norm)
    if _same(got, want):
        why = "parameters equal the reference after two steps"
    elif _same(got, unclipped):
        why = "parameters equal an UNCLIPPED step: clip after backward() and before step()"
    elif _same(got, by_value):
        why = "you clipped each entry (by value); the exercise asks to clip the total norm"
    else:
        why = "parameters differ from a clipped step (zero the gradients each step?)"
    parts = [correct("one step", _same(got, want), why)]
    g, w = _as_float(got_norm), float(want_norm)
    norm_ok = g is not None and math.isclose(g, w, rel_tol=THRESHOLDS["norm_rtol"].value)
    after = (
        " (the norm AFTER clipping: return what clip_grad_norm_ returns)" if g == max_norm else ""
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


def synthetic_history(
    seed: int, bulk: float, sigma: float, spikes: float, nonfinite: bool
) -> list[float]:
    """Typical norms (log-normal around `bulk`) with rare spikes 1e3-1e4x larger, as a run
    with exploding gradients logs them; optionally ending in inf and NaN."""
    rng = random.Random(seed)
    norms = [bulk * math.exp(rng.gauss(0, sigma)) for _ in range(300)]
    for i in rng.sample(range(300), int(spikes * 300)):
        norms[i] = bulk * 10 ** rng.uniform(3, 4)
    return norms + ([math.inf, math.nan] if nonfinite else [])


HISTORIES = {  # name -> (seed, bulk median, spread sigma, fraction of spikes, ends in inf/nan)
    "norms ~2, 5% spikes, then inf/nan": (0, 2.0, 0.6, 0.05, True),
    "norms ~0.05, 2% spikes": (1, 0.05, 0.4, 0.02, False),
    "norms ~30, 3% spikes, then inf/nan": (2, 30.0, 0.5, 0.03, True),
}


@check(
    "08-max-norm",
    points=1,
    hint="Describe the typical step, not the rare spikes nor the final inf/NaN: a robust "
    "statistic of the finite norms (median or a moderate quantile), not the mean or the max.",
)
def check_choose_max_norm(choose_max_norm):
    low, high = THRESHOLDS["max_norm_low"].value, THRESHOLDS["max_norm_high"].value
    parts = []
    for name, (seed, bulk, sigma, spikes, nonfinite) in HISTORIES.items():
        got = _as_float(choose_max_norm(synthetic_history(seed, bulk, sigma, spikes, nonfinite)))
        ok = got is not None and math.isfinite(got) and low * bulk <= got <= high * bulk
        if got is None or not math.isfinite(got):
            why = "not a finite number: drop inf/NaN before any statistic"
        elif got > high * bulk:
            why = "above the typical norm by more than 10x: the spikes pulled it up (mean? max?)"
        elif got < low * bulk:
            why = "below half the typical norm: nearly every step would be clipped (min?)"
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


def _amp_run(step, blow_up: bool):
    """Two steps of `step` on a fresh AMP problem, the second with inf gradients if `blow_up`."""
    model, optimizer, scaler, x, y = demo.amp_problem(get_device())
    norms = [step(model, nn.functional.mse_loss, x, y, optimizer, scaler, 1.0)]
    params = [p.detach().clone() for p in model.parameters()]
    if blow_up:
        x = x.clone()
        x[0, 0] = 3e38  # overflows in the forward: the gradients are inf/NaN
    norms.append(step(model, nn.functional.mse_loss, x, y, optimizer, scaler, 1.0))
    return params, [p.detach().clone() for p in model.parameters()], norms, scaler.get_scale()


def _no_unscale_step(model, loss_fn, x, y, optimizer, scaler, max_norm):
    optimizer.zero_grad(set_to_none=True)
    with torch.autocast(x.device.type, dtype=amp_dtype(x.device)):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    scaler.step(optimizer)
    scaler.update()
    return norm


@check(
    "08-amp-clip",
    points=2,
    hint="scaler.scale(loss).backward(); scaler.unscale_(optimizer); clip_grad_norm_ with the "
    "same max_norm; scaler.step(optimizer) (it skips inf steps); scaler.update(); return the "
    "norm tensor without .item().",
)
def check_amp_clipped_step(amp_clipped_step):
    want1, want2, want_norms, want_scale = _amp_run(reference_amp_clipped_step, blow_up=True)
    got1, got2, got_norms, got_scale = _amp_run(amp_clipped_step, blow_up=True)
    scaled1, *_ = _amp_run(_no_unscale_step, blow_up=False)
    if _same(got1, want1):
        why = "the step equals unscale_ -> clip -> scaler.step"
    elif _same(got1, scaled1):
        why = "you clipped the SCALED gradients (x65536): call scaler.unscale_(optimizer) first"
    else:
        why = "parameters differ from unscale_ -> clip -> scaler.step -> update"
    parts = [correct("normal step", _same(got1, want1), why)]
    finite = all(torch.isfinite(p).all() for p in got2)
    skipped = finite and _same(got2, got1)
    parts.append(
        correct(
            "step with inf gradients",
            skipped and got_scale == want_scale,
            "skipped, and the scale was lowered"
            if skipped and got_scale == want_scale
            else "the inf/NaN step changed the parameters: step through scaler.step(optimizer)"
            if not skipped
            else f"scale {got_scale:g} after an inf step, expected {want_scale:g}: call scaler.update()",
        )
    )
    norm = got_norms[0]
    g, w = _as_float(norm), float(want_norms[0])
    is_tensor = isinstance(norm, torch.Tensor)
    if g is not None and not math.isclose(g, w, rel_tol=1e-3):
        what = f"you returned {g:.4g}, the norm of the unscaled gradients is {w:.4g}"
        what += " (the norm of the scaled gradients?)" if g > 1e3 * w else ""
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
