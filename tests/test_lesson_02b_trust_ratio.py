"""Lesson 02b, check 02b-trust-ratio (tip 5, LARS): it passes a learner's LARS written as the
notebook asks and two valid variants, fails half-understood ones naming the mistake only when
the mistake reproduces the updates (settings read from the defaults when a probe confirms it),
and refuses the reference answer, given or called."""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import pytest
import torch
from check_helpers import failure, status_of
from judge_helpers import remote_verdict

from course_utils.lessons import large_batch as lesson
from course_utils.lessons.large_batch import colleagues, lars_check, lars_specimen, selftest


class LearnerLARS(torch.optim.Optimizer):
    """The notebook's skeleton with the solution a learner would write, and switches for the
    mistakes a half-understanding learner makes."""

    global_norm = wd_denominator_missing = adapt_biases = zero_ratio = no_eps = False
    clip = guard_weight_only = False
    guard_zero = wd_after_ratio = ratio_1d = invert_exclusion = False
    from_defaults: tuple[str, ...] = ()  # settings read from self.defaults, not the group

    def __init__(self, params, lr, momentum=0.9, weight_decay=0.0, trust_coef=0.001, eps=1e-8):
        defaults = dict(
            lr=lr, momentum=momentum, weight_decay=weight_decay, trust_coef=trust_coef, eps=eps
        )
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self):
        every = [p for g in self.param_groups for p in g["params"]]
        w_all = torch.cat([q.flatten() for q in every]).norm()
        g_all = torch.cat([q.grad.flatten() for q in every]).norm()
        for group in self.param_groups:
            s = {k: (self.defaults if k in self.from_defaults else group)[k] for k in group}
            lr, wd, eta, eps = s["lr"], s["weight_decay"], s["trust_coef"], s["eps"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                d, ratio = p.grad, 1.0
                if ((p.ndim > 1) != self.invert_exclusion) or self.adapt_biases:
                    if self.global_norm:
                        w_norm, g_norm = w_all, g_all
                    else:
                        w_norm, g_norm = p.norm(), p.grad.norm()
                    den = g_norm + (0.0 if self.wd_denominator_missing else wd * w_norm)
                    ratio = eta * w_norm / (den if self.no_eps else den + eps)
                    if self.clip:  # LARC's clipping
                        ratio = ratio.clamp(max=1.0)
                    guard_g = not (self.no_eps or self.guard_weight_only)
                    if not self.zero_ratio and (w_norm == 0 or (g_norm == 0 and guard_g)):
                        ratio = 0.0 if self.guard_zero else 1.0
                    if self.wd_after_ratio:  # d = ratio g + wd w
                        d, ratio = ratio * d + wd * p, 1.0
                    else:
                        d = d + wd * p
                elif self.ratio_1d:  # no weight decay on 1-D tensors, but a trust ratio
                    ratio = eta * p.norm() / (p.grad.norm() + eps)
                buf = self.state[p].setdefault("momentum_buffer", torch.zeros_like(p))
                buf.mul_(s["momentum"]).add_(ratio * d)
                p.add_(buf, alpha=-lr)


class LRInsideTheBuffer(torch.optim.Optimizer):
    """Wrong for this exercise, which asks for torch.optim.SGD's convention: the paper's
    algorithm 1 literally (v = m v + lr * ratio * d; w -= v), the ratio guarded by
    torch.where, the momentum started as torch.optim.SGD starts it."""

    def __init__(self, params, lr, momentum=0.9, weight_decay=0.0, trust_coef=0.001, eps=1e-8):
        super().__init__(params, dict(lr=lr, momentum=momentum, weight_decay=weight_decay,
                                      trust_coef=trust_coef, eps=eps))  # fmt: skip

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                d, local = p.grad.clone(), torch.tensor(1.0)
                if p.dim() >= 2:
                    w, g = torch.linalg.vector_norm(p), torch.linalg.vector_norm(p.grad)
                    raw = group["trust_coef"] * w / (g + group["weight_decay"] * w + group["eps"])
                    local = torch.where((w > 0) & (g > 0), raw, torch.ones_like(raw))
                    d.add_(p, alpha=group["weight_decay"])
                state = self.state[p]
                if "v" not in state:
                    state["v"] = group["lr"] * local * d
                else:
                    state["v"] = group["momentum"] * state["v"] + group["lr"] * local * d
                p.sub_(state["v"])


class TimmStyleFloat64(torch.optim.Optimizer):
    """Valid: timm's Lars order (weight decay added to the gradient in place, then scaled),
    norms in float64, eps-free ratio guarded where either norm is zero."""

    def __init__(self, params, lr, momentum=0.9, weight_decay=0.0, trust_coef=0.001, eps=1e-8):
        super().__init__(params, dict(lr=lr, momentum=momentum, weight_decay=weight_decay,
                                      trust_coef=trust_coef, eps=eps))  # fmt: skip

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad.clone()
                if p.ndim > 1:
                    w, g = p.double().norm(), grad.double().norm()
                    ratio = 1.0
                    if w > 0 and g > 0:
                        ratio = float(group["trust_coef"] * w / (g + w * group["weight_decay"]))
                    grad.add_(p, alpha=group["weight_decay"]).mul_(ratio)
                buf = self.state[p].get("momentum_buffer")
                if buf is None:
                    buf = self.state[p]["momentum_buffer"] = grad.clone()
                else:
                    buf.mul_(group["momentum"]).add_(grad)
                p.add_(buf, alpha=-group["lr"])


def mistake(**switches) -> type:
    return type("LARS", (LearnerLARS,), switches)


class NotInPlace(LearnerLARS):
    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p = p - group["lr"] * p.grad  # noqa: PLW2901 (the mistake under test)


@pytest.mark.parametrize("answer", [LearnerLARS, TimmStyleFloat64])
def test_trust_ratio_passes_the_notebook_answer_and_timms_order(answer):
    assert status_of(lesson.check_trust_ratio, answer) == "passed"


@pytest.mark.parametrize(
    "wrong, layer, cause",
    [
        (mistake(global_norm=True), "|w| = 40", "over all layers at once"),
        (mistake(wd_denominator_missing=True), "|w| = 40", "denominator"),
        (mistake(adapt_biases=True), "bias (1-D)", "biases and BatchNorm parameters adapted"),
        (mistake(zero_ratio=True), "zero-initialised", "ratio 0"),
        (mistake(no_eps=True), "without gradient", "divides by zero"),
        (mistake(from_defaults=tuple(lars_specimen.DEFAULTS)), "|w| = 40", "defaults"),
        (mistake(guard_weight_only=True), "with weight decay", "only where |w| = 0"),
        (LRInsideTheBuffer, "|w| = 40", "torch.optim.SGD's convention"),
        (mistake(clip=True), "|w| = 40", "clipped at 1"),
        (mistake(guard_zero=True), "zero-initialised", "ratio 0, not 1, for a zero norm"),
        (mistake(wd_after_ratio=True), "|w| = 40", "d = ratio g + wd w"),
        (mistake(ratio_1d=True), "bias (1-D)", "a trust ratio applied to biases and BatchNorm"),
        (mistake(invert_exclusion=True), "|w| = 40", "the exclusion inverted"),
        (NotInPlace, "|w| = 40", "in place"),
    ],
)
def test_trust_ratio_fails_each_mistake_on_the_layer_that_shows_it_and_names_it(
    wrong, layer, cause
):
    exc = failure(lesson.check_trust_ratio, wrong)
    assert exc.status == "failed"
    first = next(part for part in exc.summary.split("; ") if "moved it" in part or "finite" in part)
    assert layer in first, exc.summary
    assert cause in exc.summary, exc.summary


def test_trust_ratio_names_two_mistakes_together_and_no_cause_for_three():
    two = failure(lesson.check_trust_ratio, mistake(global_norm=True, adapt_biases=True))
    assert (
        "over all layers at once" in two.summary and "BatchNorm parameters adapted" in two.summary
    )
    three = mistake(global_norm=True, adapt_biases=True, wd_denominator_missing=True)
    exc = failure(lesson.check_trust_ratio, three)
    assert "no single known mistake" in exc.summary


def test_trust_ratio_names_what_sets_of_mistakes_that_move_the_specimen_alike_share():
    """With no weight decay in the direction, the layer without gradient never moves, so
    whatever ratio it gets is hidden: the check names the shared mistake and the candidates."""
    got = lars_specimen.simulate(frozenset({"guard_grad_only", "no_wd_direction"}))
    found = lars_specimen.explain(got)
    assert len(found) > 1 and frozenset({"guard_grad_only", "no_wd_direction"}) in found
    assert all("no_wd_direction" in f for f in found)
    said = lars_check._cause(got, frozenset())
    assert lars_specimen.MISTAKES["no_wd_direction"] in said and "one of these" in said
    assert lars_specimen.MISTAKES["guard_grad_only"] in said


def test_trust_ratio_names_settings_that_a_probe_finds_read_from_the_defaults():
    exc = failure(lesson.check_trust_ratio, mistake(from_defaults=("momentum",)))
    assert "exactly LARS's with momentum read from the optimizer's defaults" in exc.summary
    both = failure(lesson.check_trust_ratio, mistake(from_defaults=("lr",), global_norm=True))
    assert "exactly LARS's with norms taken over all layers at once" in both.summary
    assert "; and lr read from the optimizer's defaults" in both.summary


def test_trust_ratio_not_attempted_and_reference_refused_given_subclassed_or_called():
    class Stub(LearnerLARS):
        def step(self):
            raise NotImplementedError()

    class Borrowed(lesson.ReferenceLARS):
        pass

    class Calls(LearnerLARS):
        def step(self):
            lesson.ReferenceLARS(self.param_groups, lr=1.0).step()

    assert status_of(lesson.check_trust_ratio, Stub) == "not-attempted"
    for given in (lesson.ReferenceLARS, Borrowed, Calls):
        exc = failure(lesson.check_trust_ratio, given)
        assert exc.status == "failed" and "reference answer `ReferenceLARS`" in exc.summary
    (selftest_answer,) = selftest.answers()["02b-trust-ratio"]()
    assert status_of(lesson.check_trust_ratio, selftest_answer) == "passed"


def test_every_mistake_of_the_specimen_shows_on_some_layer():
    start, right = lars_specimen.initial_weights(), lars_specimen.simulate()
    for m in lars_specimen.MISTAKES:
        wrong = lars_specimen.simulate(frozenset([m]))
        assert not all(
            lars_specimen.close(w, r, s)
            for step_w, step_r in zip(wrong, right, strict=True)
            for w, r, s in zip(step_w, step_r, start, strict=True)
        ), m


# --- exercise 2 starts from the colleague's LARS (lesson.ColleagueLARS) ------------------------

ADAPTED = "biases and BatchNorm parameters adapted"
NO_GUARD = "no ratio 1 for a zero norm"
DEFAULTS_LR = "lr read from the optimizer's defaults"


class ColleaguePartlyFixed(lesson.ColleagueLARS):
    """The colleague's step with some of its three faults fixed (adapt_1d: the ratio and decay
    on every tensor; guard: no ratio 1 for a zero norm; lr: the LR from self.defaults)."""

    left: frozenset[str] = frozenset()

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            wd, eta = group["weight_decay"], group["trust_coef"]
            lr = self.defaults["lr"] if "lr" in self.left else group["lr"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                d, ratio = p.grad, 1.0
                if p.ndim > 1 or "adapt_1d" in self.left:
                    w_norm, g_norm = p.norm(), p.grad.norm()
                    ratio = eta * w_norm / (g_norm + wd * w_norm + group["eps"])
                    if "guard" not in self.left and (w_norm == 0 or g_norm == 0):
                        ratio = 1.0
                    d = d + wd * p
                buf = self.state[p].setdefault("momentum_buffer", torch.zeros_like(p))
                buf.mul_(group["momentum"]).add_(ratio * d)
                p.sub_(buf, alpha=lr)


def partly_fixed(*left: str) -> type:
    return type("LARS", (ColleaguePartlyFixed,), {"left": frozenset(left)})


def test_trust_ratio_names_all_three_faults_of_the_colleagues_lars():
    exc = failure(lesson.check_trust_ratio, lesson.ColleagueLARS)
    assert all(cause in exc.summary for cause in (ADAPTED, NO_GUARD, DEFAULTS_LR)), exc.summary


@pytest.mark.parametrize(
    "left",
    [
        ("adapt_1d", "guard"),
        ("adapt_1d", "lr"),
        ("guard", "lr"),
        ("adapt_1d",),
        ("guard",),
        ("lr",),
    ],
)
def test_trust_ratio_names_exactly_the_faults_a_partial_fix_of_the_colleague_leaves(left):
    causes = {"adapt_1d": ADAPTED, "guard": NO_GUARD, "lr": DEFAULTS_LR}
    exc = failure(lesson.check_trust_ratio, partly_fixed(*left))
    for fault, cause in causes.items():
        assert (cause in exc.summary) == (fault in left), (fault, exc.summary)


def test_trust_ratio_passes_the_colleagues_lars_with_every_fault_fixed():
    assert status_of(lesson.check_trust_ratio, partly_fixed()) == "passed"


def test_the_symptoms_show_each_fault_of_the_colleague_and_none_of_lars():
    """The table exercise 2 reads: under the colleague's LARS the two tensors that start at
    zero never move and the first step ignores the warm-up (a weight matrix moves by the full
    LR x eta x |w|); under LARS every tensor moves, weight matrices by about LR_1 x eta x |w|,
    1-D tensors by about LR_1 x |g|."""
    eta = colleagues.SYMPTOMS["trust_coef"]
    bad = colleagues.measure_symptoms(lesson.ColleagueLARS)
    good = colleagues.measure_symptoms(lesson.ReferenceLARS)  # refused only inside a check
    lr1, full = bad["lrs"][0], colleagues.SYMPTOMS["lr"]
    assert lr1 < full / 2  # the warm-up starts well below the peak
    for name in ("norm.bias", "branch.weight"):
        assert float(bad["start"][name].norm()) == 0
        assert all(step[name] == 0 for step in bad["moves"])
        assert good["moves"][0][name] > 0
    for name in ("hidden.weight", "head.weight"):
        w = float(good["start"][name].norm())
        assert good["moves"][0][name] == pytest.approx(lr1 * eta * w, rel=0.05)
        assert bad["moves"][0][name] == pytest.approx(full * eta * w, rel=0.05)
    for name in ("head.bias", "norm.weight"):
        assert good["moves"][0][name] == pytest.approx(lr1 * good["grads"][name], rel=0.01)
    assert "|w| = 0" in lesson.lars_symptoms(lesson.ColleagueLARS)


# --- judged as `course grade` judges: the learner's side in another process --------------------

RED_TEAM = Path(__file__).resolve().parent / "redteam"
# the reference as `course selftest` gives it (the check refuses ReferenceLARS itself), by a
# name remote_verdict's child can import
SELFTEST_LARS = selftest.answers()["02b-trust-ratio"]()[0]


def test_judged_remotely_the_reference_passes(monkeypatch):
    """The learner's optimizer trains the specimen in a probe; the weights it sends are enough
    for the judge to decide: the reference passes with its side in another process."""
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parent))
    verdict = remote_verdict("02b-trust-ratio", "test_lesson_02b_trust_ratio:SELFTEST_LARS")
    assert verdict["status"] == "passed", verdict["message"]


def test_judged_remotely_a_wrong_answer_fails_as_in_a_notebook(monkeypatch):
    """A red-team LARS without the zero-norm guard fails in the judge as in a notebook, named
    alike (the defaults probe runs in the child too)."""
    monkeypatch.syspath_prepend(str(RED_TEAM))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(RED_TEAM), str(RED_TEAM.parent)]))
    wrong = importlib.import_module("test_02_v4_blind").WrongNoGuard
    here = failure(lesson.check_trust_ratio, wrong)
    there = remote_verdict("02b-trust-ratio", "test_02_v4_blind:WrongNoGuard")
    assert here.status == there["status"] == "failed", there["message"]
    assert there["message"] == here.summary
