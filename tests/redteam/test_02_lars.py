"""Red team, notebook 02 section 6 (LARS, LAMB): wrong and valid answers to exercises 5 and 6,
written from the notebook alone (checks 02-trust-ratio and 02-optimizer-choice)."""

from __future__ import annotations

import math

import pytest
import torch
from redteam_helpers import assert_verdict, open_holes, run_check

from course_utils.lessons import large_batch as lesson

# Since issue 34 these checks are lesson 02b's (notebook 02b_large_batch, package large_batch):
# 02-lr-scaling is 02b-lr-scaling, 02-trust-ratio 02b-trust-ratio, 02-optimizer-choice
# 02b-optimizer-choice; the cases are as the red team wrote them.

# --- 02-trust-ratio: LARS.step, the notebook's skeleton with a learner's body ---------------


def _lars(update):
    """The notebook's LARS class, with `update(self, group, p)` as the learner's code in the
    inner loop (after `if p.grad is None: continue`)."""

    class LARS(torch.optim.Optimizer):
        def __init__(self, params, lr, momentum=0.9, weight_decay=0.0, trust_coef=0.001, eps=1e-8):
            settings = dict(momentum=momentum, weight_decay=weight_decay, trust_coef=trust_coef)
            super().__init__(params, dict(lr=lr, eps=eps, **settings))

        @torch.no_grad()
        def step(self, closure=None):
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    update(self, group, p)

    return LARS


def _ratio(group, p, guard="both"):
    """The notebook's trust ratio, with the variations the wrong answers make."""
    wd, eta, eps = group["weight_decay"], group["trust_coef"], group["eps"]
    w_norm, g_norm = p.norm(), p.grad.norm()
    ok = {"both": w_norm > 0 and g_norm > 0, "w": w_norm > 0, "g": g_norm > 0, "none": True}
    if not ok[guard]:
        return 1.0
    return eta * w_norm / (g_norm + wd * w_norm + eps)


def _finish(self, group, p, ratio, d, momentum=None, lr=None):
    buf = self.state[p].setdefault("momentum_buffer", torch.zeros_like(p))
    buf.mul_(group["momentum"] if momentum is None else momentum).add_(ratio * d)
    p.sub_(buf, alpha=group["lr"] if lr is None else lr)


def _right(self, group, p, guard="both", adapt=lambda p: p.ndim > 1):
    d, ratio = p.grad, 1.0
    if adapt(p):
        ratio = _ratio(group, p, guard=guard)
        d = d + group["weight_decay"] * p
    _finish(self, group, p, ratio, d)


def decay_only_in_ratio(self, group, p):
    ratio = _ratio(group, p) if p.ndim > 1 else 1.0
    _finish(self, group, p, ratio, p.grad)  # forgot wd * w in the direction


def decay_only_in_direction(self, group, p):
    d, ratio = p.grad, 1.0
    if p.ndim > 1:
        w_norm, g_norm = p.norm(), p.grad.norm()
        if w_norm > 0 and g_norm > 0:
            ratio = group["trust_coef"] * w_norm / (g_norm + group["eps"])  # no wd |w|
        d = d + group["weight_decay"] * p
    _finish(self, group, p, ratio, d)


def adapts_every_tensor(self, group, p):
    _right(self, group, p, adapt=lambda p: True)


def decays_biases(self, group, p):
    ratio = _ratio(group, p) if p.ndim > 1 else 1.0
    _finish(self, group, p, ratio, p.grad + group["weight_decay"] * p)


def only_matrices(self, group, p):
    _right(self, group, p, adapt=lambda p: p.ndim == 2)  # "weights are matrices": not convs


def no_zero_guard(self, group, p):
    _right(self, group, p, guard="none")  # eps prevents the division by zero, not ratio 0


def guards_weight_norm_only(self, group, p):
    _right(self, group, p, guard="w")


def guards_grad_norm_only(self, group, p):
    _right(self, group, p, guard="g")


def no_trust_coef(self, group, p):
    d, ratio = p.grad, 1.0
    if p.ndim > 1:
        wd, w_norm, g_norm = group["weight_decay"], p.norm(), p.grad.norm()
        if w_norm > 0 and g_norm > 0:
            ratio = w_norm / (g_norm + wd * w_norm + group["eps"])
        d = d + wd * p
    _finish(self, group, p, ratio, d)


def inverted_ratio(self, group, p):
    d, ratio = p.grad, 1.0
    if p.ndim > 1:
        wd, w_norm, g_norm = group["weight_decay"], p.norm(), p.grad.norm()
        if w_norm > 0 and g_norm > 0:
            ratio = group["trust_coef"] * (g_norm + wd * w_norm) / (w_norm + group["eps"])
        d = d + wd * p
    _finish(self, group, p, ratio, d)


def lr_inside_buffer(self, group, p):
    """You et al.'s algorithm 1 literally: v = m v + lr * local_lr * d; w -= v."""
    d, ratio = p.grad, 1.0
    if p.ndim > 1:
        ratio = _ratio(group, p)
        d = d + group["weight_decay"] * p
    _finish(self, group, p, group["lr"] * ratio, d, lr=1.0)


def ratio_after_momentum(self, group, p):
    d, ratio = p.grad, 1.0
    if p.ndim > 1:
        ratio = _ratio(group, p)
        d = d + group["weight_decay"] * p
    buf = self.state[p].setdefault("momentum_buffer", torch.zeros_like(p))
    buf.mul_(group["momentum"]).add_(d)
    p.sub_(ratio * buf, alpha=group["lr"])


def buffer_not_kept(self, group, p):
    d, ratio = p.grad, 1.0
    if p.ndim > 1:
        ratio = _ratio(group, p)
        d = d + group["weight_decay"] * p
    buf = torch.zeros_like(p)  # a fresh buffer every step: no momentum
    buf.mul_(group["momentum"]).add_(ratio * d)
    p.sub_(buf, alpha=group["lr"])


def rebinds_p(self, group, p):
    d, ratio = p.grad, 1.0
    if p.ndim > 1:
        ratio = _ratio(group, p)
        d = d + group["weight_decay"] * p
    buf = self.state[p].setdefault("momentum_buffer", torch.zeros_like(p))
    buf.mul_(group["momentum"]).add_(ratio * d)
    p = p - group["lr"] * buf  # noqa: F841  (a new tensor; the parameter does not move)


def elementwise_ratio(self, group, p):
    d, ratio = p.grad, 1.0
    if p.ndim > 1:
        wd, eta, eps = group["weight_decay"], group["trust_coef"], group["eps"]
        w, g = p.abs(), p.grad.abs()
        ratio = torch.where((w > 0) & (g > 0), eta * w / (g + wd * w + eps), 1.0)
        d = d + wd * p
    _finish(self, group, p, ratio, d)


def norm_of_decayed_direction(self, group, p):
    d, ratio = p.grad, 1.0
    if p.ndim > 1:
        d = d + group["weight_decay"] * p
        w_norm, d_norm = p.norm(), d.norm()
        if w_norm > 0 and p.grad.norm() > 0:
            ratio = group["trust_coef"] * w_norm / (d_norm + group["eps"])  # |g + wd w|
    _finish(self, group, p, ratio, d)


def momentum_from_defaults(self, group, p):
    d, ratio = p.grad, 1.0
    if p.ndim > 1:
        ratio = _ratio(group, p)
        d = d + group["weight_decay"] * p
    _finish(self, group, p, ratio, d, momentum=self.defaults["momentum"])


def lr_from_defaults(self, group, p):
    d, ratio = p.grad, 1.0
    if p.ndim > 1:
        ratio = _ratio(group, p)
        d = d + group["weight_decay"] * p
    _finish(self, group, p, ratio, d, lr=self.defaults["lr"])


def decay_added_to_grad(self, group, p):
    """Valid (added after the blind run): the norms first, then weight decay added to .grad
    itself, in place, as some optimizers do."""
    ratio = _ratio(group, p) if p.ndim > 1 else 1.0
    if p.ndim > 1:
        p.grad.add_(p, alpha=group["weight_decay"])
    _finish(self, group, p, ratio, p.grad)


class LarsTensorOnly(torch.optim.Optimizer):
    """Valid: timm-style, the ratio chosen with torch.where (no Python branch on a norm, so
    no device sync), weight decay added with `add(p, alpha=wd)`."""

    def __init__(self, params, lr, momentum=0.9, weight_decay=0.0, trust_coef=0.001, eps=1e-8):
        settings = dict(momentum=momentum, weight_decay=weight_decay, trust_coef=trust_coef)
        super().__init__(params, dict(lr=lr, eps=eps, **settings))

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            wd, eta = group["weight_decay"], group["trust_coef"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                g = p.grad
                if p.dim() >= 2:
                    w_norm = torch.linalg.vector_norm(p)
                    g_norm = torch.linalg.vector_norm(g)
                    one = torch.ones_like(w_norm)
                    local = eta * w_norm / (g_norm + wd * w_norm + group["eps"])
                    ratio = torch.where((w_norm > 0) & (g_norm > 0), local, one)
                    d = g.add(p, alpha=wd)
                else:
                    ratio, d = torch.ones((), dtype=p.dtype), g
                state = self.state[p]
                if "v" not in state:
                    state["v"] = torch.zeros_like(p)
                state["v"].mul_(group["momentum"]).add_(d * ratio)
                p.add_(state["v"], alpha=-group["lr"])


class LarsSgdStyle(torch.optim.Optimizer):
    """Valid: buffers started as torch.optim.SGD starts them (a clone of the first update),
    under another state key, a closure supported, floats from .item(), no eps (algorithm 1
    as the paper writes it; the zero-norm guard already prevents a division by zero)."""

    def __init__(self, params, lr, momentum=0.9, weight_decay=0.0, trust_coef=0.001, eps=1e-8):
        settings = dict(momentum=momentum, weight_decay=weight_decay, trust_coef=trust_coef)
        super().__init__(params, dict(lr=lr, eps=eps, **settings))

    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        with torch.no_grad():
            for group in self.param_groups:
                for p in group["params"]:
                    if p.grad is None:
                        continue
                    self._update(group, p)
        return loss

    def _update(self, group, p):
        wd, local, d = group["weight_decay"], 1.0, p.grad
        if p.ndim > 1:
            w_norm, g_norm = p.norm().item(), p.grad.norm().item()
            if w_norm != 0.0 and g_norm != 0.0:
                local = group["trust_coef"] * w_norm / (g_norm + wd * w_norm)
            d = p.grad + wd * p
        state = self.state[p]
        if "velocity" not in state:
            state["velocity"] = (local * d).clone()
        else:
            state["velocity"].mul_(group["momentum"]).add_(d, alpha=local)
        p.data.add_(state["velocity"], alpha=-group["lr"])


# Exercise 5 is now "diagnose and fix the colleague's LARS" (lesson.ColleagueLARS: ratio and
# decay on every tensor, no ratio 1 for a zero norm, the LR read from self.defaults): the
# colleague's code as given, and fixes of one or two of its faults.


def _colleague(adapt_all=False, no_guard=False, lr_from_defaults=False):
    def update(self, group, p):
        d, ratio = p.grad, 1.0
        if adapt_all or p.ndim > 1:
            ratio = _ratio(group, p, guard="none" if no_guard else "both")
            d = d + group["weight_decay"] * p
        _finish(self, group, p, ratio, d, lr=self.defaults["lr"] if lr_from_defaults else None)

    return update


def colleague_biases_excluded_only(self, group, p):
    _colleague(no_guard=True, lr_from_defaults=True)(self, group, p)


def colleague_guard_added_only(self, group, p):
    _colleague(adapt_all=True, lr_from_defaults=True)(self, group, p)


def colleague_lr_from_group_only(self, group, p):
    _colleague(adapt_all=True, no_guard=True)(self, group, p)


def colleague_all_but_the_lr(self, group, p):
    _colleague(lr_from_defaults=True)(self, group, p)


def colleague_all_fixed(self, group, p):
    _colleague()(self, group, p)


# The causes the check names ("your updates are exactly LARS's with ..."): a case's
# `not_causes` are the named causes that are not its own (a failing part's *name*, such as
# "bias (1-D)" or "zero-initialised weight", says where the updates differ, not why).
NAMED = {
    "direction": r"update direction",
    "denominator": r"denominator",
    "biases": r"biases and BatchNorm",
    "zero": r"zero-norm",
    "eta": r"trust coefficient",
    "after": r"momentum buffer",
    "momentum": r"momentum left out",
    "inplace": r"in place|rebinds",
}
MEASURED = r"no single known mistake"  # says what was measured, names no cause


def _not(*own: str) -> tuple[str, ...]:
    return tuple(rf"exactly LARS's with[^;]*(?:{p})" for k, p in NAMED.items() if k not in own)


def _wrong(update, cause, not_causes, id):
    return pytest.param(_lars(update), "failed", cause, not_causes, id=id)


TRUST_CASES = [
    _wrong(
        decay_only_in_ratio,
        r"weight decay[^;]*direction",
        _not("direction"),
        "wrong-decay-only-in-ratio",
    ),
    _wrong(
        decay_only_in_direction,
        r"weight decay[^;]*(ratio|denominator)",
        _not("denominator"),
        "wrong-decay-only-in-direction",
    ),
    _wrong(
        adapts_every_tensor, r"biases|BatchNorm|1-D", _not("biases"), "wrong-adapts-every-tensor"
    ),
    _wrong(
        decays_biases,
        r"weight decay[^;]*(biases|BatchNorm|1-D)",
        _not("biases"),
        "wrong-decays-biases",
    ),
    _wrong(only_matrices, r"conv weight", _not(), "wrong-only-2d-weights-adapted"),
    _wrong(no_zero_guard, r"zero", _not("zero"), "wrong-no-zero-norm-guard"),
    _wrong(
        guards_weight_norm_only, r"without gradient", _not("zero"), "wrong-guards-weight-norm-only"
    ),
    _wrong(guards_grad_norm_only, r"zero", _not("zero"), "wrong-guards-grad-norm-only"),
    _wrong(no_trust_coef, r"trust coef|eta", _not("eta"), "wrong-no-trust-coef"),
    _wrong(inverted_ratio, rf"invert|{MEASURED}", _not(), "wrong-inverted-ratio"),
    _wrong(
        lr_inside_buffer,
        rf"\blr\b|learning rate|{MEASURED}",
        _not(),
        "wrong-lr-inside-momentum-buffer",
    ),
    _wrong(ratio_after_momentum, r"momentum buffer", _not("after"), "wrong-ratio-after-momentum"),
    _wrong(buffer_not_kept, r"momentum", _not("momentum"), "wrong-momentum-buffer-not-kept"),
    _wrong(rebinds_p, r"in place|rebinds", _not("inplace"), "wrong-rebinds-p-not-in-place"),
    _wrong(
        elementwise_ratio, rf"whole tensor|element|{MEASURED}", _not(), "wrong-elementwise-ratio"
    ),
    _wrong(
        norm_of_decayed_direction,
        rf"\|g \+ wd w\||{MEASURED}",
        _not(),
        "wrong-norm-of-decayed-direction",
    ),
    _wrong(momentum_from_defaults, rf"group|{MEASURED}", _not(), "wrong-momentum-from-defaults"),
    _wrong(lr_from_defaults, rf"group|{MEASURED}", _not(), "wrong-lr-from-defaults"),
    pytest.param(
        lesson.ColleagueLARS,
        "failed",
        r"biases and BatchNorm.*zero norm.*defaults",
        (),
        id="wrong-colleague-as-given",
    ),
    _wrong(
        colleague_biases_excluded_only,
        r"zero norm.*defaults",
        _not("zero"),
        "wrong-colleague-biases-excluded-only",
    ),
    _wrong(
        colleague_guard_added_only,
        r"biases and BatchNorm.*defaults",
        _not("biases"),
        "wrong-colleague-guard-added-only",
    ),
    _wrong(
        colleague_lr_from_group_only,
        r"biases and BatchNorm.*zero norm",
        _not("biases", "zero") + (r"defaults",),
        "wrong-colleague-lr-fixed-only",
    ),
    _wrong(colleague_all_but_the_lr, r"defaults", _not(), "wrong-colleague-lr-left"),
    pytest.param(_lars(colleague_all_fixed), "passed", None, (), id="valid-colleague-fixed"),
    pytest.param(_lars(_right), "passed", None, (), id="valid-notebook-hint-as-helpers"),
    pytest.param(LarsTensorOnly, "passed", None, (), id="valid-torch-where-no-sync"),
    pytest.param(LarsSgdStyle, "passed", None, (), id="valid-sgd-style-buffer-no-eps"),
    pytest.param(
        _lars(decay_added_to_grad), "passed", None, (), id="valid-decay-added-to-grad-in-place"
    ),
]

TRUST_HOLES: dict[str, str] = {}  # both found by the blind run are fixed (README.md)


@pytest.mark.parametrize(
    "optimizer_class, expected, cause, not_causes", open_holes(TRUST_CASES, TRUST_HOLES)
)
def test_trust_ratio(optimizer_class, expected, cause, not_causes):
    verdict = run_check(lesson.check_trust_ratio, optimizer_class)
    assert_verdict(verdict, expected, cause, not_causes)


# --- 02-optimizer-choice: choose_optimizer(races) -> a key of races, or None ----------------

INF = float("inf")


def _adamw_key(races):
    return next(k for k in races if "AdamW" in k)


def choose_fewest_steps(races):
    return min(races.values(), key=lambda r: r.steps).name


def choose_most_accurate(races):
    return max(races.values(), key=lambda r: max(acc for _, acc in r.curve)).name


def choose_always_adamw(races):
    return _adamw_key(races)  # "no extra hyper-parameter": never look at the race


def choose_fastest_or_none(races):
    reached = [r for r in races.values() if r.steps < INF]
    return min(reached, key=lambda r: r.steps).name if reached else None


def choose_ten_percent_faster(races):
    adamw = races[_adamw_key(races)]
    reached = [r for r in races.values() if r.steps < INF]
    if not reached:
        return None
    fastest = min(reached, key=lambda r: r.steps)
    return fastest.name if fastest.steps < 0.9 * adamw.steps else adamw.name


def choose_fastest_spread_only(races):
    adamw = races[_adamw_key(races)]
    reached = [r for r in races.values() if r.steps < INF]
    if not reached:
        return None
    fastest = min(reached, key=lambda r: r.steps)
    if fastest is adamw or adamw.steps == INF:
        return fastest.name
    return fastest.name if adamw.steps - fastest.steps > fastest.spread else adamw.name


def choose_adamw_when_nobody(races):
    adamw = races[_adamw_key(races)]
    reached = [r for r in races.values() if r.steps < INF]
    if not reached:
        return adamw.name  # "when the evidence is missing, AdamW stays"
    fastest = min(reached, key=lambda r: r.steps)
    if fastest is adamw or adamw.steps == INF:
        return fastest.name
    noise = max(fastest.spread, adamw.spread)
    return fastest.name if adamw.steps - fastest.steps > noise else adamw.name


def choose_by_last_logged_step(races):
    """Reads steps off the curve: the last step logged, which is the budget for a run that
    never got there."""
    return min(races.values(), key=lambda r: r.curve[-1][0] if r.curve else INF).name


def choose_returns_race(races):
    reached = [r for r in races.values() if r.steps < INF]
    return min(reached, key=lambda r: r.steps) if reached else None  # the Race, not its name


def choose_against_runner_up(races):
    """Checks the winner's gap to the runner-up, not to AdamW: a tie between LARS and LAMB
    that both beat AdamW clearly falls back to AdamW."""
    adamw = races[_adamw_key(races)]
    ranked = sorted((r for r in races.values() if r.steps < INF), key=lambda r: r.steps)
    if not ranked:
        return None
    if len(ranked) == 1:
        return ranked[0].name
    first, second = ranked[:2]
    return (
        first.name if second.steps - first.steps > max(first.spread, second.spread) else adamw.name
    )


def choose_sorted_by_substring(races):
    """Valid: AdamW found by name, the others ranked, keys returned."""
    adamw_key = _adamw_key(races)
    finite = sorted(
        (k for k in races if math.isfinite(races[k].steps)), key=lambda k: races[k].steps
    )
    if not finite:
        return None
    best = finite[0]
    if best == adamw_key or not math.isfinite(races[adamw_key].steps):
        return best
    gap = races[adamw_key].steps - races[best].steps
    return best if gap > max(races[best].spread, races[adamw_key].spread) else adamw_key


def choose_gap_at_least_spread(races):
    """Valid under the blind run's notebook, whose words it takes literally (a gap *smaller*
    than the spread is not evidence, so a gap equal to it is); wrong since the notebook and the
    reference agree that a gap no larger than the spread is noise (race "a gap equal to the
    spread")."""
    adamw = races["AdamW, linear scaling + warm-up"]
    contenders = {k: r for k, r in races.items() if r.steps != INF}
    if not contenders:
        return None
    name = min(contenders, key=lambda k: contenders[k].steps)
    if adamw.steps == INF:
        return name
    noise = max(contenders[name].spread, adamw.spread)
    return name if adamw.steps - contenders[name].steps >= noise else adamw.name


# A part's name ("the fastest is not the most accurate") is the race, not a cause: the
# accuracy shortcut is named by "the race is to the target".
def choose_pops_adamw(races):
    """Valid (added after the blind run): takes AdamW out of the dict it was given."""
    adamw = races.pop(_adamw_key(races))
    others = [r for r in races.values() if r.steps < INF]
    if adamw.steps == INF:
        return min(others, key=lambda r: r.steps).name if others else None
    best = min(others, key=lambda r: r.steps, default=adamw)
    gap = adamw.steps - best.steps
    return best.name if gap > max(best.spread, adamw.spread) else adamw.name


CHOICE_CASES = [
    pytest.param(
        choose_fewest_steps,
        "failed",
        r"noise|spread",
        (r"the race is to the target",),
        id="wrong-fewest-steps",
    ),
    pytest.param(
        choose_most_accurate,
        "failed",
        r"the race is to the target",
        (r"never reached",),
        id="wrong-most-accurate",
    ),
    pytest.param(
        choose_always_adamw,
        "failed",
        r"clear|win|LARS|LAMB",
        (r"keep AdamW",),
        id="wrong-always-adamw",
    ),
    pytest.param(
        choose_fastest_or_none,
        "failed",
        r"noise|spread",
        (r"the race is to the target", r"nobody"),
        id="wrong-fastest-ignores-spread",
    ),
    pytest.param(
        choose_ten_percent_faster,
        "failed",
        r"noise|spread",
        (r"the race is to the target", r"nobody"),
        id="wrong-ten-percent-rule",
    ),
    pytest.param(
        choose_fastest_spread_only,
        "failed",
        r"noise|spread",
        (r"the race is to the target", r"nobody"),
        id="wrong-spread-of-the-fastest-only",
    ),
    pytest.param(
        choose_adamw_when_nobody,
        "failed",
        r"nobody|None|no evidence",
        (r"the race is to the target", r"spread"),
        id="wrong-adamw-when-nobody-reached",
    ),
    pytest.param(
        choose_by_last_logged_step,
        "failed",
        r"steps|reached",
        (),
        id="wrong-steps-from-the-curve",
    ),
    pytest.param(
        choose_returns_race,
        "failed",
        r"\bkey\b|a str|string|name, not|not a name",
        # a right decision of the wrong type explained as a decision
        (r"you chose Race\(name='(?P<n>[^']*)'[^;]*the race says '(?P=n)'",),
        id="wrong-returns-the-race",
    ),
    pytest.param(
        choose_against_runner_up,
        "failed",
        r"AdamW|clear|win",
        (r"the race is to the target",),
        id="wrong-gap-to-runner-up",
    ),
    pytest.param(choose_sorted_by_substring, "passed", None, (), id="valid-sorted-keys"),
    pytest.param(
        choose_gap_at_least_spread,
        "failed",
        r"equal to the spread|no larger than the spread",
        (r"the race is to the target", r"nobody"),
        id="wrong-gap-at-least-spread",
    ),
    pytest.param(choose_pops_adamw, "passed", None, (), id="valid-pops-adamw-from-the-dict"),
]

CHOICE_HOLES: dict[str, str] = {}  # the three found by the blind run are fixed (README.md)


@pytest.mark.parametrize(
    "choose, expected, cause, not_causes", open_holes(CHOICE_CASES, CHOICE_HOLES)
)
def test_optimizer_choice(choose, expected, cause, not_causes):
    verdict = run_check(lesson.check_optimizer_choice, choose)
    assert_verdict(verdict, expected, cause, not_causes)
