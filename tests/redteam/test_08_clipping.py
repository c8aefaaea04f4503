"""Red team for notebook 08 (gradient clipping), written from the notebook alone.

Each case is a learner answer with the verdict the check must give and, for a wrong answer,
the cause its message must name (`names`) and causes it must not name (`not_names`), both
regexes matched against the messages of the parts that did not pass.
"""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest
import torch
from redteam_helpers import assert_graded, case, grade
from torch import nn

from course_utils.lessons import clipping as lesson

# One torch thread: a loaded 2-core machine runs these small models far faster so, and no
# verdict depends on the thread count (timed sections pin their own threads anyway).
pytestmark = pytest.mark.usefixtures("one_thread")

# --- grading a learner function, the way the notebook's check cell calls it ---------------


# --- 08-total-norm ---------------------------------------------------------------------------


def _grads(parameters):
    return [p.grad for p in parameters if p.grad is not None]


def valid_flatten_concat(parameters, norm_type=2.0):
    """All gradients as one vector, then its norm."""
    return torch.linalg.vector_norm(torch.cat([g.flatten() for g in _grads(parameters)]), norm_type)


def valid_power_sum(parameters, norm_type=2.0):
    """The p-norm written out: (sum |g|^p)^(1/p), and the largest |entry| for inf."""
    grads = _grads(parameters)
    if math.isinf(norm_type):
        return max(g.abs().max() for g in grads)
    return sum((g.double().abs() ** norm_type).sum() for g in grads) ** (1.0 / norm_type)


def valid_foreach_as_float(parameters, norm_type=2.0):
    """PyTorch's fused per-tensor norms; returns a Python float (the task asks for no tensor)."""
    per_tensor = torch._foreach_norm(_grads(parameters), norm_type)
    return float(torch.linalg.vector_norm(torch.stack(per_tensor), norm_type))


def wrong_sum_of_norms(parameters, norm_type=2.0):
    return sum(torch.linalg.vector_norm(g, norm_type) for g in _grads(parameters))


def wrong_outer_two_norm(parameters, norm_type=2.0):
    """Per-tensor p-norms combined with a 2-norm whatever p is."""
    per_tensor = torch.stack([torch.linalg.vector_norm(g, norm_type) for g in _grads(parameters)])
    return torch.linalg.vector_norm(per_tensor, 2.0)


def wrong_inf_without_abs(parameters, norm_type=2.0):
    grads = _grads(parameters)
    if math.isinf(norm_type):
        return max(g.max() for g in grads)  # the largest entry, not the largest |entry|
    return torch.linalg.vector_norm(
        torch.stack([torch.linalg.vector_norm(g, norm_type) for g in grads]), norm_type
    )


def wrong_generator_read_twice(parameters, norm_type=2.0):
    if not any(p.grad is not None for p in parameters):  # consumes the generator up to a grad
        return torch.tensor(0.0)
    grads = _grads(parameters)
    return torch.linalg.vector_norm(
        torch.stack([torch.linalg.vector_norm(g, norm_type) for g in grads]), norm_type
    )


def wrong_abs_in_place(parameters, norm_type=2.0):
    grads = _grads(parameters)
    if math.isinf(norm_type):
        return max(g.abs_().max() for g in grads)  # "saves memory", flips every negative gradient
    return sum((g.abs_() ** norm_type).sum() for g in grads) ** (1.0 / norm_type)


def wrong_calls_clip_with_inf(parameters, norm_type=2.0):
    return nn.utils.clip_grad_norm_(parameters, float("inf"), norm_type)


def wrong_filters_on_requires_grad(parameters, norm_type=2.0):
    grads = [p.grad for p in parameters if p.requires_grad]  # unused parameters: grad is None
    return torch.linalg.vector_norm(
        torch.stack([torch.linalg.vector_norm(g, norm_type) for g in grads]), norm_type
    )


TOTAL_NORM = [
    case(valid_flatten_concat, "passed"),
    case(valid_power_sum, "passed"),
    case(valid_foreach_as_float, "passed"),
    case(wrong_sum_of_norms, names=r"norm_type|clip_grad_norm_ returns"),
    case(wrong_outer_two_norm, names=r"norm_type=(1|3)", not_names=r"norm_type=2\b[^|]*differ"),
    case(wrong_inf_without_abs, names=r"inf"),
    case(wrong_generator_read_twice, names=r"generator|iterat"),
    case(wrong_abs_in_place, names=r"gradient.*(chang|modif)|in.place"),
    case(wrong_calls_clip_with_inf, names=r"clip_grad_norm_"),
    case(wrong_filters_on_requires_grad, names=r"raised"),
]


@pytest.mark.parametrize("fn, expect, names, not_names", TOTAL_NORM)
def test_total_norm(fn, expect, names, not_names):
    assert_graded(grade(lesson.check_total_norm, fn), expect, names, not_names)


# --- 08-clipped-step -------------------------------------------------------------------------


def _loss(model, loss_fn, x, y):
    return loss_fn(model(x), y)


def _norm_of(params):
    grads = [p.grad for p in params if p.grad is not None]
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))


def valid_hand_clipped(model, loss_fn, x, y, optimizer, max_norm):
    """clip_grad_norm_ written out: scale by max_norm / (norm + 1e-6), at most 1."""
    optimizer.zero_grad()
    _loss(model, loss_fn, x, y).backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    norm = _norm_of(model.parameters())
    scale = (max_norm / (norm + 1e-6)).clamp(max=1.0)
    for g in grads:
        g.mul_(scale)
    optimizer.step()
    return norm


def valid_all_groups_float(model, loss_fn, x, y, optimizer, max_norm):
    """Clips what the optimizer updates (every group), zeroes in place, logs a float."""
    optimizer.zero_grad(set_to_none=False)
    _loss(model, loss_fn, x, y).backward()
    params = [p for group in optimizer.param_groups for p in group["params"]]
    norm = nn.utils.clip_grad_norm_(params, max_norm, foreach=True)
    optimizer.step()
    return norm.item()


def wrong_clip_before_backward(model, loss_fn, x, y, optimizer, max_norm):
    optimizer.zero_grad()
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    _loss(model, loss_fn, x, y).backward()
    optimizer.step()
    return norm


def wrong_clip_after_step(model, loss_fn, x, y, optimizer, max_norm):
    optimizer.zero_grad()
    _loss(model, loss_fn, x, y).backward()
    optimizer.step()
    return nn.utils.clip_grad_norm_(model.parameters(), max_norm)


def wrong_clip_by_value(model, loss_fn, x, y, optimizer, max_norm):
    optimizer.zero_grad()
    _loss(model, loss_fn, x, y).backward()
    norm = _norm_of(model.parameters())
    nn.utils.clip_grad_value_(model.parameters(), max_norm)
    optimizer.step()
    return norm


def wrong_returns_norm_after_clipping(model, loss_fn, x, y, optimizer, max_norm):
    optimizer.zero_grad()
    _loss(model, loss_fn, x, y).backward()
    nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    norm = _norm_of(model.parameters())  # what the step used, not what was clipped
    optimizer.step()
    return norm


def wrong_no_zero_grad(model, loss_fn, x, y, optimizer, max_norm):
    _loss(model, loss_fn, x, y).backward()
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return norm


def wrong_always_rescales(model, loss_fn, x, y, optimizer, max_norm):
    """Normalises every step to max_norm, also when the norm was already below it."""
    optimizer.zero_grad()
    _loss(model, loss_fn, x, y).backward()
    norm = _norm_of(model.parameters())
    for p in model.parameters():
        if p.grad is not None:
            p.grad.mul_(max_norm / norm)
    optimizer.step()
    return norm


def wrong_per_tensor_clip(model, loss_fn, x, y, optimizer, max_norm):
    optimizer.zero_grad()
    _loss(model, loss_fn, x, y).backward()
    norm = _norm_of(model.parameters())
    for p in model.parameters():
        nn.utils.clip_grad_norm_([p], max_norm)  # each tensor on its own
    optimizer.step()
    return norm


def wrong_zero_grad_before_step(model, loss_fn, x, y, optimizer, max_norm):
    _loss(model, loss_fn, x, y).backward()
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.zero_grad()  # "clean up" before stepping: the step sees no gradient
    optimizer.step()
    return norm


def wrong_first_group_only(model, loss_fn, x, y, optimizer, max_norm):
    optimizer.zero_grad()
    _loss(model, loss_fn, x, y).backward()
    norm = nn.utils.clip_grad_norm_(optimizer.param_groups[0]["params"], max_norm)
    optimizer.step()
    return norm


def wrong_inf_norm_clip(model, loss_fn, x, y, optimizer, max_norm):
    optimizer.zero_grad()
    _loss(model, loss_fn, x, y).backward()
    norm = nn.utils.clip_grad_norm_(model.parameters(), max_norm, norm_type=float("inf"))
    optimizer.step()
    return norm


CLIPPED_STEP = [
    case(valid_hand_clipped, "passed"),
    case(valid_all_groups_float, "passed"),
    case(wrong_clip_before_backward, names=r"before|no gradient|backward", not_names=r"by value"),
    case(wrong_clip_after_step, names=r"after|step", not_names=r"by value|zero"),
    case(wrong_clip_by_value, names=r"value|direction", not_names=r"zero|order"),
    case(wrong_returns_norm_after_clipping, names=r"before clipping|returned"),
    case(wrong_no_zero_grad, names=r"zero|accumulat", not_names=r"by value"),
    case(wrong_always_rescales, names=r"below|smaller|under|rescal|every", not_names=r"zero"),
    case(wrong_per_tensor_clip, names=r"per.tensor|each tensor|total", not_names=r"zero"),
    case(wrong_zero_grad_before_step, names=r"did not move|no gradient", not_names=r"by value"),
    case(wrong_first_group_only, names=r"group", not_names=r"zero"),
    case(wrong_inf_norm_clip, names=r"2-norm|norm_type|inf", not_names=r"zero"),
]


@pytest.mark.parametrize("fn, expect, names, not_names", CLIPPED_STEP)
def test_clipped_step(fn, expect, names, not_names):
    assert_graded(grade(lesson.check_clipped_step, fn), expect, names, not_names)


# --- 08-max-norm -----------------------------------------------------------------------------


def _finite(norms):
    return [n for n in norms if math.isfinite(n)]


def valid_twice_median(norms):
    return 2 * statistics.median(_finite(norms))


def valid_geometric_mean(norms):
    return math.exp(statistics.fmean(math.log(n) for n in _finite(norms) if n > 0))


def valid_trimmed_mean(norms):
    """The mean of the middle 80%: the spikes are cut off before averaging."""
    kept = sorted(_finite(norms))
    cut = len(kept) // 10
    return statistics.fmean(kept[cut : len(kept) - cut])


def valid_third_quartile_tensor(norms):
    t = torch.tensor(norms, dtype=torch.float64)
    return torch.quantile(t[torch.isfinite(t)], 0.75)


def wrong_mean(norms):
    return statistics.fmean(_finite(norms))


def wrong_max(norms):
    return max(_finite(norms))


def wrong_first_norm(norms):
    return _finite(norms)[0]


def wrong_99th_percentile(norms):
    return float(np.percentile(_finite(norms), 99))


def wrong_constant_default(norms):
    return 1.0  # "the common default in published recipes"


def wrong_min(norms):
    return min(_finite(norms))


def wrong_np_median_keeps_nan(norms):
    return float(np.median(norms))


def wrong_last_finite(norms):
    return _finite(norms)[-1]


MAX_NORM = [
    case(valid_twice_median, "passed"),
    case(valid_geometric_mean, "passed"),
    case(valid_trimmed_mean, "passed"),
    case(valid_third_quartile_tensor, "passed"),
    case(wrong_mean, names=r"accepted|typical", not_names=r"\bmax(imum)?\b|percentile"),
    case(wrong_max, names=r"accepted|typical", not_names=r"\bmean\b|average"),
    case(wrong_first_norm, names=r"accepted|typical", not_names=r"\bmean\b"),
    case(wrong_99th_percentile, names=r"accepted|typical", not_names=r"\bmean\b"),
    case(wrong_constant_default, names=r"accepted|typical", not_names=r"\bmean\b"),
    case(wrong_min, names=r"accepted|typical", not_names=r"\bmean\b"),
    case(wrong_np_median_keeps_nan, names=r"nan|finite"),
    case(wrong_last_finite, names=r"accepted|typical", not_names=r"\bmean\b"),
]


@pytest.mark.parametrize("fn, expect, names, not_names", MAX_NORM)
def test_choose_max_norm(fn, expect, names, not_names):
    assert_graded(grade(lesson.check_choose_max_norm, fn), expect, names, not_names)
