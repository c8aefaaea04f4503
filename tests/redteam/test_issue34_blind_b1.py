"""Blind red team (b1) for lessons 08 and 09: 08-max-norm, 08-clipped-step, 08-accum-clip and
09-fuse.

Written from the learner notebooks alone (`notebooks/08_gradient_clipping.ipynb`,
`09_no_bias_before_bn.ipynb`: exercise text, hints, stubs, the colleagues' code they show), the
README, the glossary, the signatures and docstrings a learner reads with `help()`
(`lesson.check_*`, `lesson.synthetic_history`, `lesson.accumulation_table`, `lesson.feeds_bn`,
`lesson.batch_norm_calls`, `lesson.small_variance_model`, `lesson.scenario_model`; both
lessons' `THRESHOLDS` printed from Python, evidence included), the printed `scenario_model()`
and what `feeds_bn` returns on it, the checks' messages on these answers (run as black boxes)
and `redteam_helpers.py`; never the lessons' checks, probes, references, diagnoses or tests,
nor the other red-team files. Each case is a learner answer with the verdict it deserves and,
for a wrong one, the cause the failing parts must name (`names`) and a cause they must not name
(`not_names`), both regexes. Each check is called as its notebook's check cell calls it. The
cases the checks got wrong in the round are closed (comments beside ACCUM and FUSE say how).

Run: COURSE_QUICK=1 COURSE_REDTEAM=all pytest -q -p no:cacheprovider
tests/redteam/test_issue34_blind_b1.py
"""

from __future__ import annotations

import copy
import math
import os
import statistics

os.environ.setdefault("COURSE_QUICK", "1")

import numpy as np
import pytest
import torch
from redteam_helpers import assert_graded, case, grade, in_ci
from torch import nn
from torch.nn.utils.fusion import fuse_conv_bn_eval, fuse_linear_bn_eval

from course_utils.lessons import bn_bias as lesson09
from course_utils.lessons import clipping as lesson08

# =============================================================================================
# 08-max-norm: choose_max_norm(norms) -> a threshold within half to ten times the typical norm
# =============================================================================================


def _finite(norms):
    return [n for n in norms if math.isfinite(n)]


def valid_median_plus_mad(norms):
    """Median plus three median absolute deviations of the finite norms: a robust 'upper edge
    of the bulk', so typical steps are left alone."""
    finite = _finite(norms)
    mid = statistics.median(finite)
    mad = statistics.median(abs(n - mid) for n in finite)
    return mid + 3 * mad


def valid_interquartile_mean(norms):
    """The mean of the finite norms between the quartiles (a 25% trimmed mean each side)."""
    finite = sorted(_finite(norms))
    cut = len(finite) // 4
    return statistics.fmean(finite[cut : len(finite) - cut])


def valid_numpy_masked_percentile(norms):
    """numpy: mask the non-finite entries, the 60th percentile of what is left, times 2 for
    headroom."""
    a = np.asarray(norms, dtype=float)
    return float(2 * np.percentile(a[np.isfinite(a)], 60))


def valid_log_median(norms):
    """The geometric middle: exp of the median of the logs of the finite, positive norms."""
    return math.exp(statistics.median(math.log(n) for n in _finite(norms) if n > 0))


def valid_torch_median_tensor(norms):
    """torch: the finite entries' median, returned as a 0-d tensor (the notebook's demo calls
    float() on it)."""
    t = torch.tensor(norms, dtype=torch.float64)
    return t[torch.isfinite(t)].median()


def wrong_mean_of_finite(norms):
    """Pascanu's 'average norm' read literally: the mean of the finite norms."""
    return statistics.fmean(_finite(norms))


def wrong_max_of_finite(norms):
    """The largest finite norm: 'never clip a step that did not explode'."""
    return max(_finite(norms))


def wrong_p95(norms):
    """The 95th percentile of the finite norms."""
    return statistics.quantiles(_finite(norms), n=20)[-1]


def wrong_middle_entry_unsorted(norms):
    """The 'median' as the middle entry of the list as logged, never sorted."""
    finite = _finite(norms)
    return finite[len(finite) // 2]


def wrong_median_with_nan_left_in(norms):
    """Only `inf` dropped (`n != inf`): the NaN stays in and breaks the sort under the median."""
    return statistics.median([n for n in norms if n != float("inf")])


def wrong_trim_tail_only(norms):
    """Drops the last two entries (where the run blew up) and takes the median of the rest,
    with NaN left in."""
    return statistics.median(norms[:-2])


def wrong_trim_5_percent_mean(norms):
    """Sorted finite norms, the top 5% cut off, the mean of the rest."""
    finite = sorted(_finite(norms))
    return statistics.fmean(finite[: int(len(finite) * 0.95)])


def wrong_fixed_one(norms):
    """The 'common default' of published recipes: 1.0 whatever the history."""
    return 1.0


def wrong_min_of_finite(norms):
    """The smallest finite norm: 'clip everything above the calmest step'."""
    return min(_finite(norms))


def wrong_np_median(norms):
    """np.median on the raw history: NaN propagates."""
    return float(np.median(norms))


SPIKES = r"spike|mean|max|outlier|robust|too (high|large)|above"
MAX_NORM = [
    case(valid_median_plus_mad, "passed"),
    case(valid_interquartile_mean, "passed"),
    case(valid_numpy_masked_percentile, "passed"),
    case(valid_log_median, "passed"),
    case(valid_torch_median_tensor, "passed"),
    case(wrong_mean_of_finite, names=SPIKES, not_names=r"not a finite|below half"),
    case(wrong_max_of_finite, names=SPIKES, not_names=r"not a finite|below half"),
    case(wrong_p95, names=r"8%|spike|percentile|too (high|large)|above"),
    case(wrong_middle_entry_unsorted, names=r"middle|sort|order|mid-run|spike"),
    case(wrong_median_with_nan_left_in, names=r"nan|sort|finite"),
    case(wrong_trim_tail_only, names=r"nan|inf|mid-run|finite|skipped"),
    case(wrong_trim_5_percent_mean, names=r"8%|spike|mean|too (high|large)|above"),
    case(wrong_fixed_one, names=r"0\.05|30|typical|same|fixed|constant"),
    case(wrong_min_of_finite, names=r"too (low|small)|below|every step|typical"),
    case(wrong_np_median, names=r"nan|finite|not a number"),
]


MAX_NORM = in_ci(MAX_NORM, {"wrong-mean_of_finite"})  # fast, but 15 of them add up


@pytest.mark.parametrize(("fn", "expect", "names", "not_names"), MAX_NORM)
def test_max_norm(fn, expect, names, not_names):
    choose_max_norm = fn
    assert_graded(grade(lesson08.check_choose_max_norm, choose_max_norm), expect, names, not_names)


# =============================================================================================
# 08-clipped-step: clipped_step(model, loss_fn, x, y, optimizer, max_norm) -> norm before clip
# =============================================================================================


def _grads(model):
    return [p.grad for p in model.parameters() if p.grad is not None]


def _backward(model, loss_fn, x, y, optimizer):
    optimizer.zero_grad(set_to_none=True)
    loss_fn(model(x), y).backward()


def valid_get_total_norm_api(model, loss_fn, x, y, optimizer, max_norm):
    """torch's split API: get_total_norm, then clip_grads_with_norm_ with that norm."""
    _backward(model, loss_fn, x, y, optimizer)
    grads = _grads(model)
    norm = nn.utils.get_total_norm(grads, 2.0)
    nn.utils.clip_grads_with_norm_(list(model.parameters()), max_norm, norm)
    optimizer.step()
    return norm


def valid_autograd_grad_by_hand(model, loss_fn, x, y, optimizer, max_norm):
    """torch.autograd.grad (no zero_grad needed), the total 2-norm and the clip by hand (no
    1e-6 in the denominator), the clipped gradients put in .grad for the optimizer."""
    params = [p for p in model.parameters() if p.requires_grad]
    grads = torch.autograd.grad(loss_fn(model(x), y), params, allow_unused=True)
    norm = torch.linalg.vector_norm(
        torch.stack([torch.linalg.vector_norm(g) for g in grads if g is not None])
    )
    coef = torch.clamp(max_norm / norm, max=1.0)
    for p, g in zip(params, grads, strict=True):
        p.grad = None if g is None else g * coef
    optimizer.step()
    return norm


def valid_all_param_groups_float(model, loss_fn, x, y, optimizer, max_norm):
    """The parameters the optimizer updates, from every param group; the norm as a float."""
    _backward(model, loss_fn, x, y, optimizer)
    params = [p for group in optimizer.param_groups for p in group["params"]]
    norm = nn.utils.clip_grad_norm_(params, max_norm)
    optimizer.step()
    return norm.item()


def wrong_clip_before_backward(model, loss_fn, x, y, optimizer, max_norm):
    """The colleague's first try: the clip runs before backward, on no gradient."""
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(model(x), y)
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    loss.backward()
    optimizer.step()
    return norm


def wrong_clip_after_step(model, loss_fn, x, y, optimizer, max_norm):
    """The colleague's second try: step with the raw gradient, then clip."""
    _backward(model, loss_fn, x, y, optimizer)
    optimizer.step()
    return nn.utils.clip_grad_norm_(model.parameters(), max_norm)


def wrong_clip_by_value(model, loss_fn, x, y, optimizer, max_norm):
    """The guide's 'min(gradient, threshold)': each entry clamped, the norm only measured."""
    _backward(model, loss_fn, x, y, optimizer)
    norm = nn.utils.get_total_norm(_grads(model))
    nn.utils.clip_grad_value_(model.parameters(), max_norm)
    optimizer.step()
    return norm


def wrong_returns_norm_after_clip(model, loss_fn, x, y, optimizer, max_norm):
    """Clips right, but logs the norm after clipping: min(norm, max_norm)."""
    _backward(model, loss_fn, x, y, optimizer)
    nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return nn.utils.get_total_norm(_grads(model))


def wrong_no_zero_grad(model, loss_fn, x, y, optimizer, max_norm):
    """No zero_grad: the second step clips and applies the sum of both steps' gradients."""
    loss_fn(model(x), y).backward()
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return norm


def wrong_inf_norm(model, loss_fn, x, y, optimizer, max_norm):
    """Clips the largest entry's size (norm_type=inf), not the 2-norm."""
    _backward(model, loss_fn, x, y, optimizer)
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm, norm_type=float("inf"))
    optimizer.step()
    return norm


def wrong_clip_each_tensor(model, loss_fn, x, y, optimizer, max_norm):
    """Each parameter's gradient clipped on its own: changes the direction; returns the total
    norm, measured first."""
    _backward(model, loss_fn, x, y, optimizer)
    norm = nn.utils.get_total_norm(_grads(model))
    for p in model.parameters():
        nn.utils.clip_grad_norm_([p], max_norm)
    optimizer.step()
    return norm


def wrong_always_rescale(model, loss_fn, x, y, optimizer, max_norm):
    """Scales every gradient to norm max_norm, the min(1, .) forgotten: lengthens small steps."""
    _backward(model, loss_fn, x, y, optimizer)
    norm = nn.utils.get_total_norm(_grads(model))
    for g in _grads(model):
        g.mul_(max_norm / norm)
    optimizer.step()
    return norm


def wrong_first_param_group(model, loss_fn, x, y, optimizer, max_norm):
    """Clips the first param group only: right whenever the optimizer has one group."""
    _backward(model, loss_fn, x, y, optimizer)
    norm = nn.utils.clip_grad_norm_(optimizer.param_groups[0]["params"], max_norm)
    optimizer.step()
    return norm


def wrong_squared_norm(model, loss_fn, x, y, optimizer, max_norm):
    """The norm by hand without the square root: the sum of squares compared and returned."""
    _backward(model, loss_fn, x, y, optimizer)
    sq = sum(g.pow(2).sum() for g in _grads(model))
    coef = torch.clamp(max_norm / sq, max=1.0)
    for g in _grads(model):
        g.mul_(coef)
    optimizer.step()
    return sq


def wrong_generator_reused(model, loss_fn, x, y, optimizer, max_norm):
    """Exercise 1's generator trap: one `model.parameters()` read twice, so the clip's pass
    finds it empty and nothing is clipped."""
    _backward(model, loss_fn, x, y, optimizer)
    params = model.parameters()
    norm = nn.utils.get_total_norm([p.grad for p in params if p.grad is not None])
    nn.utils.clip_grads_with_norm_(params, max_norm, norm)
    optimizer.step()
    return norm


def wrong_clamp_loss(model, loss_fn, x, y, optimizer, max_norm):
    """'Clipping' the loss instead of the gradient: a clamped loss has no gradient above
    max_norm, so a step from a large loss does not move."""
    optimizer.zero_grad(set_to_none=True)
    loss_fn(model(x), y).clamp(max=max_norm).backward()
    norm = nn.utils.get_total_norm(_grads(model))
    optimizer.step()
    return norm


def wrong_sum_of_tensor_norms(model, loss_fn, x, y, optimizer, max_norm):
    """Exercise 1's logger carried into the clip: the total 'norm' is the sum of the
    per-tensor 2-norms, so the clip shortens too much and the norm returned is too large."""
    _backward(model, loss_fn, x, y, optimizer)
    total = sum(torch.linalg.vector_norm(g) for g in _grads(model))
    coef = torch.clamp(max_norm / total, max=1.0)
    for g in _grads(model):
        g.mul_(coef)
    optimizer.step()
    return total


def wrong_returns_nothing(model, loss_fn, x, y, optimizer, max_norm):
    """The step is right; the norm is never returned."""
    _backward(model, loss_fn, x, y, optimizer)
    nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()


# These answers return the norm their own gradient had before clipping: a failing "returned
# norm" part tells the learner their logging is wrong when it is not.
RIGHT_NORM_BLAMED = r"returned norm"
CLIPPED = [
    case(valid_get_total_norm_api, "passed"),
    case(valid_autograd_grad_by_hand, "passed"),
    case(valid_all_param_groups_float, "passed"),
    case(wrong_clip_before_backward, names=r"before backward|no \.grad|returned 0|did not move"),
    case(wrong_clip_after_step, names=r"after (optimizer\.)?step|unclipped|before step"),
    case(
        wrong_clip_by_value,
        names=r"by value|clip_grad_value_|entr|direction",
        not_names=RIGHT_NORM_BLAMED,
    ),
    case(
        wrong_returns_norm_after_clip,
        names=r"after clipping|before clipping|max_norm",
        not_names=r"parameters differ|unclipped",
    ),
    case(wrong_no_zero_grad, names=r"zero_grad|accumulat|previous|clear|add"),
    case(wrong_inf_norm, names=r"inf|2-norm|norm_type|norm type|largest entry"),
    case(
        wrong_clip_each_tensor,
        names=r"each (param|tensor)|per.?(param|tensor)|separately|total",
        not_names=RIGHT_NORM_BLAMED,
    ),
    case(wrong_always_rescale, names=r"below max_norm|idle|lengthen|rescal|longer|always"),
    case(wrong_first_param_group, names=r"param group|param_groups|some parameters"),
    case(wrong_squared_norm, names=r"square|sqrt|2-norm", not_names=r"order of calls"),
    case(
        wrong_generator_reused,
        names=r"unclipped|generator|nothing|never",
        not_names=RIGHT_NORM_BLAMED,
    ),
    case(wrong_clamp_loss, names=r"loss|did not move|no gradient|zero"),
    case(
        wrong_sum_of_tensor_norms,
        names=r"sum|per-tensor|each tensor|total norm",
        not_names=r"order of calls",
    ),
    case(wrong_returns_nothing, names=r"return|None|norm"),
]
CLIPPED = in_ci(CLIPPED, {"valid-get_total_norm_api", "wrong-clip_after_step"})  # 150-step runs


@pytest.mark.parametrize(("fn", "expect", "names", "not_names"), CLIPPED)
def test_clipped_step(fn, expect, names, not_names):
    clipped_step = fn
    assert_graded(grade(lesson08.check_clipped_step, clipped_step), expect, names, not_names)


# =============================================================================================
# 08-accum-clip: accumulated_clipped_step(model, loss_fn, micro_batches, optimizer, max_norm)
# =============================================================================================


def _accumulate(model, loss_fn, micro_batches, optimizer, scale=None):
    optimizer.zero_grad(set_to_none=True)
    for x, y in micro_batches:
        (loss_fn(model(x), y) / (scale or len(micro_batches))).backward()


def valid_weighted_by_samples(model, loss_fn, micro_batches, optimizer, max_norm):
    """Each micro-batch's mean loss weighted by its share of the samples (right for unequal
    sizes too), one clip after the last backward."""
    optimizer.zero_grad(set_to_none=True)
    total = sum(len(x) for x, _ in micro_batches)
    for x, y in micro_batches:
        (loss_fn(model(x), y) * (len(x) / total)).backward()
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return norm


def valid_divide_grads_after(model, loss_fn, micro_batches, optimizer, max_norm):
    """Unscaled backwards, .grad divided by the count once at the end, then one clip by hand
    with a tensor coefficient (no sync)."""
    _accumulate(model, loss_fn, micro_batches, optimizer, scale=1)
    grads = _grads(model)
    for g in grads:
        g.div_(len(micro_batches))
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    coef = torch.clamp(max_norm / (norm + 1e-6), max=1.0)
    for g in grads:
        g.mul_(coef)
    optimizer.step()
    return norm


def valid_autograd_grad_sum(model, loss_fn, micro_batches, optimizer, max_norm):
    """torch.autograd.grad per micro-batch, summed in a list, put in .grad, then the split
    API (get_total_norm + clip_grads_with_norm_)."""
    params = [p for p in model.parameters() if p.requires_grad]
    total = [torch.zeros_like(p) for p in params]
    for x, y in micro_batches:
        loss = loss_fn(model(x), y) / len(micro_batches)
        for t, g in zip(total, torch.autograd.grad(loss, params), strict=True):
            t.add_(g)
    for p, t in zip(params, total, strict=True):
        p.grad = t
    norm = nn.utils.get_total_norm(total)
    nn.utils.clip_grads_with_norm_(params, max_norm, norm)
    optimizer.step()
    return norm


def wrong_clip_every_micro_batch(model, loss_fn, micro_batches, optimizer, max_norm):
    """The colleague's step: a clip after each micro-batch's backward."""
    optimizer.zero_grad(set_to_none=True)
    for x, y in micro_batches:
        (loss_fn(model(x), y) / len(micro_batches)).backward()
        norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return norm


def wrong_not_divided(model, loss_fn, micro_batches, optimizer, max_norm):
    """The sum of the micro-batches' mean losses: k times the gradient. With clipping acting
    the direction is the same and the step too; idle, it is k times too long."""
    _accumulate(model, loss_fn, micro_batches, optimizer, scale=1)
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return norm


def wrong_divided_by_micro_size(model, loss_fn, micro_batches, optimizer, max_norm):
    """Divides each mean loss by the micro-batch's sample count, not by the number of
    micro-batches."""
    optimizer.zero_grad(set_to_none=True)
    for x, y in micro_batches:
        (loss_fn(model(x), y) / len(x)).backward()
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return norm


def wrong_returns_item(model, loss_fn, micro_batches, optimizer, max_norm):
    """Right step, but the norm read with .item(): a float and a sync per step."""
    _accumulate(model, loss_fn, micro_batches, optimizer)
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return norm.item()


def wrong_retensored_item(model, loss_fn, micro_batches, optimizer, max_norm):
    """A tensor returned, but made from .item(): the sync is still there."""
    _accumulate(model, loss_fn, micro_batches, optimizer)
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return torch.tensor(norm.item())


def wrong_python_if_on_norm(model, loss_fn, micro_batches, optimizer, max_norm):
    """A manual clip under `if norm > max_norm:`: the Python branch reads the tensor (a sync
    per step)."""
    _accumulate(model, loss_fn, micro_batches, optimizer)
    grads = _grads(model)
    norm = nn.utils.get_total_norm(grads)
    if norm > max_norm:
        for g in grads:
            g.mul_(max_norm / norm)
    optimizer.step()
    return norm


def wrong_whole_batch_forward(model, loss_fn, micro_batches, optimizer, max_norm):
    """Concatenates the micro-batches and runs one forward: right numbers, no memory saved."""
    optimizer.zero_grad(set_to_none=True)
    x = torch.cat([x for x, _ in micro_batches])
    y = torch.cat([y for _, y in micro_batches])
    loss_fn(model(x), y).backward()
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return norm


def wrong_zero_grad_per_micro_batch(model, loss_fn, micro_batches, optimizer, max_norm):
    """zero_grad inside the loop: only the last micro-batch's gradient is left."""
    for x, y in micro_batches:
        optimizer.zero_grad(set_to_none=True)
        (loss_fn(model(x), y) / len(micro_batches)).backward()
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return norm


def wrong_clip_before_last_backward(model, loss_fn, micro_batches, optimizer, max_norm):
    """One clip, but placed before the last micro-batch's backward: the last part unclipped."""
    optimizer.zero_grad(set_to_none=True)
    norm = None
    for i, (x, y) in enumerate(micro_batches):
        if i == len(micro_batches) - 1:
            norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        (loss_fn(model(x), y) / len(micro_batches)).backward()
    optimizer.step()
    return norm


def wrong_returns_clipped_norm(model, loss_fn, micro_batches, optimizer, max_norm):
    """Right step; returns the norm after clipping, as a tensor: right only when idle."""
    _accumulate(model, loss_fn, micro_batches, optimizer)
    nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return nn.utils.get_total_norm(_grads(model))


def wrong_hardcoded_four(model, loss_fn, micro_batches, optimizer, max_norm):
    """Lesson 07's `ACCUM_STEPS = 4` typed in: right only when there are four micro-batches."""
    _accumulate(model, loss_fn, micro_batches, optimizer, scale=4)
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return norm


def wrong_accum_first_param_group(model, loss_fn, micro_batches, optimizer, max_norm):
    """Clips the first param group only: right whenever the optimizer has one group."""
    _accumulate(model, loss_fn, micro_batches, optimizer)
    norm = nn.utils.clip_grad_norm_(optimizer.param_groups[0]["params"], max_norm)
    optimizer.step()
    return norm


ACCUM = [
    case(valid_weighted_by_samples, "passed"),
    case(valid_divide_grads_after, "passed"),
    case(valid_autograd_grad_sum, "passed"),
    case(wrong_clip_every_micro_batch, names=r"each micro|every micro|after the last|partial"),
    case(wrong_not_divided, names=r"divid|len\(micro_batches\)|times|mean|scale"),
    case(
        wrong_divided_by_micro_size,
        names=r"divid|len\(micro_batches\)|factor|times|scale",
        not_names=r"when your clip runs",
    ),
    case(wrong_returns_item, names=r"tensor|item|float|sync", not_names=r"parameters differ"),
    case(wrong_retensored_item, names=r"item|sync|float"),
    case(wrong_python_if_on_norm, names=r"sync|if|branch|bool|item"),
    case(wrong_whole_batch_forward, names=r"forward|one micro-batch|samples"),
    case(wrong_zero_grad_per_micro_batch, names=r"zero_grad|only the last|accumulat|last micro"),
    case(wrong_clip_before_last_backward, names=r"last|before|after the last|partial"),
    case(wrong_returns_clipped_norm, names=r"before clipping|after clipping|returned"),
    case(wrong_hardcoded_four, names=r"divid|len\(micro_batches\)|number of micro|4|k "),
    case(wrong_accum_first_param_group, names=r"param group|param_groups|some parameters"),
]


ACCUM = in_ci(ACCUM, set())  # each case trains: seconds
# closed after the round: a loss divided by the micro-batch's sample count is replayed and
# named; host reads (.item(), an `if` on the norm) are counted by course_utils.host_reads


@pytest.mark.parametrize(("fn", "expect", "names", "not_names"), ACCUM)
def test_accum_clip(fn, expect, names, not_names):
    accumulated_clipped_step = fn
    assert_graded(
        grade(lesson08.check_accumulated_clipped_step, accumulated_clipped_step),
        expect,
        names,
        not_names,
    )


# =============================================================================================
# 09-fuse: fuse_for_inference(model, example) -> an eval-mode copy, conv -> BN pairs fused
# =============================================================================================


def _replace(model, name, module):
    parent, _, leaf = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, leaf, module)


def _fuse_pairs(fused, pairs, linear=False):
    for layer, bn in pairs.items():
        conv, norm = fused.get_submodule(layer), fused.get_submodule(bn)
        if isinstance(conv, nn.Conv2d):
            _replace(fused, layer, fuse_conv_bn_eval(conv, norm))
        elif linear and isinstance(conv, nn.Linear):
            _replace(fused, layer, fuse_linear_bn_eval(conv, norm))
        else:
            continue
        _replace(fused, bn, nn.Identity())
    return fused


def _fold_by_hand(conv, bn, eps=True):
    a = bn.weight / torch.sqrt(bn.running_var + (bn.eps if eps else 0.0))
    new = copy.deepcopy(conv)
    bias = conv.bias if conv.bias is not None else torch.zeros_like(bn.running_mean)
    with torch.no_grad():
        new.weight = nn.Parameter(conv.weight * a.reshape(-1, 1, 1, 1))
        new.bias = nn.Parameter(a * (bias - bn.running_mean) + bn.bias)
    return new


def valid_hand_fold(model, example):
    """Section 4's formula by hand, eps kept, for each conv pair feeds_bn reports in eval mode."""
    fused = copy.deepcopy(model).eval()
    for layer, bn in lesson09.feeds_bn(fused, example, train=False).items():
        conv, norm = fused.get_submodule(layer), fused.get_submodule(bn)
        if isinstance(conv, nn.Conv2d):
            _replace(fused, layer, _fold_by_hand(conv, norm))
            _replace(fused, bn, nn.Identity())
    return fused


def valid_linear_fused_too(model, example):
    """Every pair, the Linear -> BatchNorm1d one too (fuse_linear_bn_eval): one BN fewer than
    asked for, outputs the same."""
    fused = copy.deepcopy(model).eval()
    return _fuse_pairs(fused, lesson09.feeds_bn(fused, example, train=False), linear=True)


def valid_eval_pairs_on_training_copy(model, example):
    """Pairs read from the (train-mode) given model, without touching it; the copy put in eval
    mode afterwards, and each module pair switched to eval before fusing."""
    pairs = lesson09.feeds_bn(model, example, train=False)
    fused = copy.deepcopy(model)
    for layer, bn in pairs.items():
        conv, norm = fused.get_submodule(layer), fused.get_submodule(bn)
        if isinstance(conv, nn.Conv2d):
            _replace(fused, layer, fuse_conv_bn_eval(conv.eval(), norm.eval()))
            _replace(fused, bn, nn.Identity())
    return fused.eval()


def valid_fx_fuser(model, example):
    """torch.fx's own fuser on an eval copy: a traced GraphModule, the BN nodes dropped (no
    Identity left: the graph no longer calls them); it checks a conv's output has one user."""
    from torch.fx.experimental.optimization import fuse

    return fuse(copy.deepcopy(model).eval())


def wrong_fold_forgets_running_mean(model, example):
    """The fold by hand with b' = a * b + beta: the running mean left out."""
    fused = copy.deepcopy(model).eval()
    for layer, bn in lesson09.feeds_bn(fused, example, train=False).items():
        conv, norm = fused.get_submodule(layer), fused.get_submodule(bn)
        if isinstance(conv, nn.Conv2d):
            new = _fold_by_hand(conv, norm)
            a = norm.weight / torch.sqrt(norm.running_var + norm.eps)
            with torch.no_grad():
                new.bias += a * norm.running_mean  # undoes the "- running_mean" of the fold
            _replace(fused, layer, new)
            _replace(fused, bn, nn.Identity())
    return fused


def wrong_fused_in_place(model, example):
    """Fuses the given model itself and returns it."""
    model.eval()
    return _fuse_pairs(model, lesson09.feeds_bn(model, example, train=False))


def wrong_eval_before_deepcopy(model, example):
    """`model.eval()` then the copy: the given model is left in eval mode."""
    fused = copy.deepcopy(model.eval())
    return _fuse_pairs(fused, lesson09.feeds_bn(fused, example, train=False))


def wrong_submodules_eval_on_original(model, example):
    """Switches the given model's conv and BN modules (not the top one) to eval to fuse them:
    `model.training` is still True, the submodules are not."""
    fused = copy.deepcopy(model).eval()
    for layer, bn in lesson09.feeds_bn(model, example, train=False).items():
        conv, norm = model.get_submodule(layer), model.get_submodule(bn)
        if isinstance(conv, nn.Conv2d):
            _replace(fused, layer, fuse_conv_bn_eval(conv.eval(), norm.eval()))
            _replace(fused, bn, nn.Identity())
    return fused


def wrong_train_forward_on_given(model, example):
    """Runs the example through the given model first ('to see it works'): a train-mode
    forward that updates its BN running statistics."""
    with torch.no_grad():
        model(example)
    fused = copy.deepcopy(model).eval()
    return _fuse_pairs(fused, lesson09.feeds_bn(fused, example, train=False))


def wrong_shallow_copy(model, example):
    """copy.copy: a new top module sharing its children, so the fusion replaces the given
    model's blocks' modules."""
    fused = copy.copy(model).eval()
    return _fuse_pairs(fused, lesson09.feeds_bn(fused, example, train=False))


def wrong_copy_left_in_train(model, example):
    """The pairs are set to eval to fuse them; the copy itself is never switched: the other
    BNs still normalise with the batch's statistics."""
    fused = copy.deepcopy(model)
    for layer, bn in lesson09.feeds_bn(fused, example, train=False).items():
        conv, norm = fused.get_submodule(layer), fused.get_submodule(bn)
        if isinstance(conv, nn.Conv2d):
            _replace(fused, layer, fuse_conv_bn_eval(conv.eval(), norm.eval()))
            _replace(fused, bn, nn.Identity())
    return fused


def wrong_hand_fold_without_eps(model, example):
    """The fold by hand with a = gamma / sqrt(running_var): eps left out."""
    fused = copy.deepcopy(model).eval()
    for layer, bn in lesson09.feeds_bn(fused, example, train=False).items():
        conv, norm = fused.get_submodule(layer), fused.get_submodule(bn)
        if isinstance(conv, nn.Conv2d):
            _replace(fused, layer, _fold_by_hand(conv, norm, eps=False))
            _replace(fused, bn, nn.Identity())
    return fused


def wrong_sibling_attributes(model, example):
    """Pairs read from the module tree: every module whose children include a Conv2d and a
    BatchNorm2d is fused, whatever its forward does with them."""
    fused = copy.deepcopy(model).eval()
    for name, module in list(fused.named_modules()):
        children = dict(module.named_children())
        convs = [k for k, m in children.items() if isinstance(m, nn.Conv2d)]
        bns = [k for k, m in children.items() if isinstance(m, nn.BatchNorm2d)]
        if convs and bns:
            prefix = f"{name}." if name else ""
            pair = {prefix + convs[0]: prefix + bns[0]}
            _fuse_pairs(fused, pair)
    return fused


def wrong_adjacent_in_sequential(model, example):
    """Only Conv2d -> BatchNorm2d neighbours inside an nn.Sequential (the usual recipe): safe,
    but the custom blocks' pairs are never fused."""
    fused = copy.deepcopy(model).eval()
    for name, module in list(fused.named_modules()):
        if isinstance(module, nn.Sequential):
            kids = list(module.named_children())
            for (a, ma), (b, mb) in zip(kids, kids[1:], strict=False):
                if isinstance(ma, nn.Conv2d) and isinstance(mb, nn.BatchNorm2d):
                    prefix = f"{name}." if name else ""
                    _fuse_pairs(fused, {prefix + a: prefix + b})
    return fused


def wrong_fold_in_place_on_original(model, example):
    """Folds by hand in place, but looks the modules up on `model`, not on the copy: the given
    model's conv weights are scaled, the copy gets the folded conv."""
    fused = copy.deepcopy(model).eval()
    for layer, bn in lesson09.feeds_bn(fused, example, train=False).items():
        conv, norm = model.get_submodule(layer), model.get_submodule(bn)
        if isinstance(conv, nn.Conv2d):
            a = norm.weight / torch.sqrt(norm.running_var + norm.eps)
            with torch.no_grad():
                conv.weight.mul_(a.reshape(-1, 1, 1, 1))
                conv.bias.copy_(a * (conv.bias - norm.running_mean) + norm.bias)
            _replace(fused, layer, copy.deepcopy(conv))
            _replace(fused, bn, nn.Identity())
    return fused


def wrong_bn_kept(model, example):
    """Fused conv put in place, but the BN left after it: BN applied twice."""
    fused = copy.deepcopy(model).eval()
    for layer, bn in lesson09.feeds_bn(fused, example, train=False).items():
        conv, norm = fused.get_submodule(layer), fused.get_submodule(bn)
        if isinstance(conv, nn.Conv2d):
            _replace(fused, layer, fuse_conv_bn_eval(conv, norm))
    return fused


NOT_GIVEN = r"training model|given model|unchanged|left as"
FORMULA = r"reread section 4|formula"  # for answers whose fold is right
FUSE = [
    case(valid_hand_fold, "passed"),
    case(valid_linear_fused_too, "passed"),
    case(valid_eval_pairs_on_training_copy, "passed"),
    case(valid_fx_fuser, "passed"),
    case(wrong_fused_in_place, names=r"replaced|in place|copy|training model|given"),
    case(wrong_eval_before_deepcopy, names=r"train mode|eval mode|mode", not_names=r"eval output"),
    case(wrong_submodules_eval_on_original, names=r"train mode|eval mode|mode|submodule"),
    case(wrong_train_forward_on_given, names=r"statistic|running|forward", not_names=FORMULA),
    case(wrong_shallow_copy, names=r"replaced|copy|training model|given"),
    case(wrong_copy_left_in_train, names=r"train mode|eval mode|mode", not_names=NOT_GIVEN),
    case(wrong_hand_fold_without_eps, names=r"eps|small variance", not_names=NOT_GIVEN),
    case(
        wrong_sibling_attributes,
        names=r"ReLU|sum|data flow|BnThenConv|ReluThenBn|AddThenBn|[234]\.conv|feeds_bn|only",
        not_names=NOT_GIVEN,
    ),
    case(wrong_adjacent_in_sequential, names=r"batch-norm|BN|left|fused", not_names=NOT_GIVEN),
    case(
        wrong_fold_forgets_running_mean,
        names=r"running_mean|running mean|formula|section 4",
        not_names=NOT_GIVEN,
    ),
    case(wrong_fold_in_place_on_original, names=r"weights|changed|given|copy"),
    case(wrong_bn_kept, names=r"twice|Identity|batch-norm", not_names=FORMULA),
]


FUSE = in_ci(FUSE, set())  # a timed speed part per case
# closed after the round: folding the sibling blocks (ReLU -> BN, sum -> BN, BN -> conv) is
# replayed on the check's side and those blocks named


@pytest.mark.parametrize(("fn", "expect", "names", "not_names"), FUSE)
def test_fuse(fn, expect, names, not_names):
    fuse_for_inference = fn
    assert_graded(grade(lesson09.check_fuse, fuse_for_inference), expect, names, not_names)
