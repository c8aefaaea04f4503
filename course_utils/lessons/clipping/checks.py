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
from . import amp_probes, demo, probes
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
    points=2,  # a diagnosis: two independent faults (how norms combine; a generator read twice)
    hint="Reread the colleague's norm table: which rows are right, and what do they have in "
    "common? Run lesson.norm_table on your function: a wrong p=2 or p=inf column and a wrong "
    "generator row are two different mistakes.",
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
    points=2,  # a diagnosis from two logs: which gradient each clip saw, which step() used
    hint="Reread the two colleagues' logs in Exercise 2: at the moment each one called "
    "clip_grad_norm_, what was in .grad, and which gradient had optimizer.step() used or not "
    "yet used? Log the norm your own step returns and train with lesson.train_rnn.",
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
    points=2,  # one decision: which statistic of a skewed history describes a typical step
    hint="A threshold should describe the typical step. Try your rule on "
    "lesson.synthetic_history(seed, bulk, 0.5, 0.05, True) for a bulk you chose: the check "
    "accepts half to ten times the bulk, whatever the spikes and the final inf/nan do.",
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


@check(
    "08-amp-clip",
    points=2,  # one diagnosis: which gradients the colleague's clip saw
    hint="Compare the norms the colleague's step returned with float32's (section 3's runs): "
    "by what factor do they differ, and where did that factor come from? Train yours with "
    "lesson.train_amp next to lesson.fp32_clipped_step; return the norm as a tensor.",
)
def check_amp_clipped_step(amp_clipped_step):
    want = amp_probes.amp_run(reference_amp_clipped_step)
    got = amp_probes.amp_run(amp_clipped_step)
    w, scale = float(want.norms[0]), want.calls.of("step", 0)[0].scale  # 2**16 at first
    g = _as_float(got.norms[0]) if got.norms else None
    both = [amp_probes.same(a, b) for a, b in zip(got.params, want.params[:2], strict=False)]
    if len(both) >= 2 and all(both[:2]):
        why = "both steps equal unscale_ -> clip -> scaler.step -> update"
    elif both and not both[0]:
        why = amp_probes.first_step(got, want, w, scale)
    elif got.refused:
        why = "the first step is right; " + amp_probes.refused(got)
    else:
        why = amp_probes.leftover(got) or (
            "the first step is right, the second differs from unscale_ -> clip -> scaler.step "
            "-> update: compare what your step leaves behind for the next one"
        )
    parts = [correct("normal steps", len(both) >= 2 and all(both[:2]), why)]
    parts.append(_inf_part(got, want))
    parts.append(_norm_part(got.norms[0] if got.norms else None, g, w, scale))
    return parts


def _inf_part(got, want):
    name = "step with inf gradients"
    if got.refused:
        return correct(name, False, amp_probes.refused(got))
    why = amp_probes.inf_step(got, want.scales[amp_probes.BLOW_UP])
    if why:
        return correct(name, False, why)
    after = got.params[amp_probes.AFTER]
    if amp_probes.unmoved(after, got.params[amp_probes.BLOW_UP]):  # the next step skipped
        why = amp_probes.leftover(got) or (
            "the normal step after the inf one was skipped too (its parameters did not move): "
            f"the scale went {got.scales[amp_probes.BLOW_UP]:g} -> {got.scales[-1]:g}"
        )
        return correct(name, False, why)
    return correct(name, True, "skipped, the scale lowered, and the next step taken")


def _norm_part(norm, g: float | None, w: float, scale: float):
    ok = g is not None and math.isclose(g, w, rel_tol=1e-3)
    if g is not None and not ok:
        what = f"you returned {g:.4g}; the gradients' norm before clipping is {w:.4g}"
        if math.isclose(g, w * scale, rel_tol=1e-2):
            what += f": {scale:g} (the scale) times it, the norm of the scaled gradients"
        elif math.isclose(g, 1.0, rel_tol=1e-3):
            what += " (you returned the norm AFTER clipping)"
    elif g is None:
        what = f"you returned {norm!r}, not the norm: return what clip_grad_norm_ returns"
    elif not isinstance(norm, torch.Tensor):
        what = (
            f"you returned a {type(norm).__name__}: .item() each step waits for the device "
            "(a host-device sync); return the tensor, read it when you log"
        )
    else:
        what = "the norm before clipping, as a tensor"
    return correct("returned norm", ok and isinstance(norm, torch.Tensor), what)
