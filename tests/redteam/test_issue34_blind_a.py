"""Blind red team (a) for the checks changed under issue 34: 02-throughput-sweep, 02-noise-scale,
02b-trust-ratio, 03-transfer and 04-loss-scale.

Written from the learner notebooks alone (`notebooks/02_batch_size.ipynb`,
`02b_large_batch.ipynb`, `03_data_loading.ipynb`, `04_mixed_precision.ipynb`: exercise text,
hints, stubs, and what they show with `cu.show_source`: `colleague_sweep`, `ColleagueLARS`),
the signatures and docstrings a learner reads with `help()` (`cu.throughput`, `cu.time_fn`,
`lesson.make_step`, `lesson.NoisyRegression`, `lesson.cpu_pipeline`, `lesson.snapshot`, the
check functions' docstrings, `lesson.THRESHOLDS["grad_error"]` as `cu.show_limits` prints it),
the README and `redteam_helpers.py`; never the lessons' checks, probes, references, diagnoses
or tests, nor the other red-team files. Each case is a learner answer with the verdict it
deserves and, for a wrong one, the cause the failing parts must name (`names`) and a cause
they must not name (`not_names`), both regexes. Each check is called as its notebook's check
cell calls it. Cases the check gets wrong stay, marked with `open_holes` (strict xfail).

Run: COURSE_QUICK=1 COURSE_REDTEAM=all pytest -q -p no:cacheprovider
tests/redteam/test_issue34_blind_a.py
"""

from __future__ import annotations

import os
import statistics
import time

os.environ.setdefault("COURSE_QUICK", "1")

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from redteam_helpers import assert_graded, case, grade, in_ci, open_holes

import course_utils as cu
from course_utils.lessons import batch_size as lesson02
from course_utils.lessons import data_loading as lesson03
from course_utils.lessons import large_batch as lesson02b
from course_utils.lessons import mixed_precision as lesson04

# =============================================================================================
# 02-throughput-sweep: throughput_sweep(make_step, batch_sizes) -> {b: samples per second}
# =============================================================================================


def _median_call(step, warmup=3, repeats=7, sync=True):
    wait = cu.synchronize if sync else (lambda: None)
    for _ in range(warmup):
        step()
    times = []
    for _ in range(repeats):
        wait()
        start = time.perf_counter()
        step()
        wait()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def valid_manual_median(make_step, batch_sizes):
    """A step per size, three warm-up calls, the median of seven single-call timings."""
    return {b: b / _median_call(make_step(b)) for b in batch_sizes}


def valid_blocks_of_calls(make_step, batch_sizes):
    """Warm-up, then the median over five blocks of four calls each (per-call time = block / 4):
    notebook 00's way for fast steps, a clock reading per block."""
    rates = {}
    for b in batch_sizes:
        step = make_step(b)
        step()
        step()
        blocks = []
        for _ in range(5):
            cu.synchronize()
            start = time.perf_counter()
            for _ in range(4):
                step()
            cu.synchronize()
            blocks.append((time.perf_counter() - start) / 4)
        rates[b] = b / statistics.median(blocks)
    return rates


def valid_cu_time_fn(make_step, batch_sizes):
    """`cu.time_fn` with its own warm-up and median, then batch over the median seconds."""
    out = {}
    for b in batch_sizes:
        timing = cu.time_fn(make_step(b), warmup=2, repeats=9)
        out[b] = b / timing.median
    return out


def wrong_no_sync(make_step, batch_sizes):
    """Two faults fixed (a step per size, warm-up and a median), the third not: the clock is
    read without waiting for the device, so on a GPU each timing holds only the launches."""
    return {b: b / _median_call(make_step(b), sync=False) for b in batch_sizes}


def wrong_one_step_for_all(make_step, batch_sizes):
    """Warm-up and a median fixed, but still the colleague's one step, built for the first size,
    timed for every b: the rates rise in proportion to b."""
    step = make_step(batch_sizes[0])
    return {b: b / _median_call(step) for b in batch_sizes}


def wrong_first_call_only(make_step, batch_sizes):
    """A step per size (that fault fixed), but each timed once, on its first call."""
    rates = {}
    for b in batch_sizes:
        step = make_step(b)
        start = time.perf_counter()
        step()
        rates[b] = b / (time.perf_counter() - start)
    return rates


def wrong_mean_with_first_call(make_step, batch_sizes):
    """Five calls per fresh step, averaged, the first (slow) call among them: no warm-up."""
    rates = {}
    for b in batch_sizes:
        step = make_step(b)
        start = time.perf_counter()
        for _ in range(5):
            step()
        rates[b] = b * 5 / (time.perf_counter() - start)
    return rates


def wrong_steps_per_second(make_step, batch_sizes):
    """Steps per second, not samples: 1 / t, the batch forgotten."""
    return {b: 1 / _median_call(make_step(b)) for b in batch_sizes}


def wrong_block_not_divided(make_step, batch_sizes):
    """A block of five calls timed after warm-up, but b over the whole block's seconds: every
    rate five times too low."""
    rates = {}
    for b in batch_sizes:
        step = make_step(b)
        step()
        step()
        start = time.perf_counter()
        for _ in range(5):
            step()
        rates[b] = b / (time.perf_counter() - start)
    return rates


def wrong_milliseconds(make_step, batch_sizes):
    """Samples per millisecond: the median in ms, b / ms."""
    return {b: b / (_median_call(make_step(b)) * 1e3) for b in batch_sizes}


def wrong_shifted_keys(make_step, batch_sizes):
    """Off by one: the rate measured at each size stored under the next size's key (the loop
    over zip(batch_sizes[1:], ...) written the wrong way round)."""
    rates = {}
    measured = [b / _median_call(make_step(b)) for b in batch_sizes]
    for key, rate in zip(batch_sizes, [measured[0], *measured[:-1]], strict=True):
        rates[key] = rate
    return rates


NOT_SWEEP_FAULTS = r"first call|first size's step|steps/s"  # causes these answers do not have
THROUGHPUT = [
    case(valid_manual_median, "passed"),
    case(valid_blocks_of_calls, "passed"),
    case(valid_cu_time_fn, "passed"),
    case(wrong_no_sync, names=r"synchron|wait|device|launch"),
    case(
        wrong_one_step_for_all,
        names=r"first size's step|make_step\(b\) for each",
        not_names=r"first call|steps/s",
    ),
    case(wrong_first_call_only, names=r"first call|warm up", not_names=r"first size's step"),
    case(wrong_mean_with_first_call, names=r"first call|warm up", not_names=r"first size's step"),
    case(wrong_steps_per_second, names=r"steps/s|batch size", not_names=r"first call|first size"),
    case(wrong_block_not_divided, names=r"factor off", not_names=NOT_SWEEP_FAULTS),
    case(wrong_milliseconds, names=r"factor off", not_names=NOT_SWEEP_FAULTS),
    case(wrong_shifted_keys, names=r"factor off", not_names=NOT_SWEEP_FAULTS),
]
THROUGHPUT = in_ci(THROUGHPUT, {"valid-manual_median", "wrong-first_call_only"})
THROUGHPUT = open_holes(
    THROUGHPUT,
    {
        "wrong-no_sync": "a sweep that never synchronises passes: the check's steps of known "
        "cost run synchronously, so the colleague's third fault (no wait for the device) is "
        "not tested on a CPU",
    },
)


@pytest.mark.parametrize(("fn", "expect", "names", "not_names"), THROUGHPUT)
def test_throughput_sweep(fn, expect, names, not_names):
    throughput_sweep = fn
    assert_graded(
        grade(lesson02.check_throughput_sweep, throughput_sweep), expect, names, not_names
    )


# =============================================================================================
# 02-noise-scale: noise_scale(gradient, b_small, b_big, n) -> B_simple
# =============================================================================================


def _mean_sq(gradient, b, n):
    return torch.stack([gradient(b).double().pow(2).sum() for _ in range(n)]).mean().item()


def valid_linear_solve(gradient, b_small, b_big, n):
    """The two identities as a 2x2 linear system, solved by torch.linalg.solve."""
    s, big = _mean_sq(gradient, b_small, n), _mean_sq(gradient, b_big, n)
    A = torch.tensor([[1.0, 1.0 / b_small], [1.0, 1.0 / b_big]], dtype=torch.float64)
    g2, tr = torch.linalg.solve(A, torch.tensor([s, big], dtype=torch.float64)).tolist()
    return tr / g2


def valid_sample_variance(gradient, b_small, b_big, n):
    """Another unbiased pair: tr(Sigma) from the unbiased sample variance (ddof 1) of the small
    batches' gradients times b_small; |G|^2 from the squared norm of the mean of the big
    batches' gradients less its own noise, tr(Sigma) / (n b_big)."""
    small = torch.stack([gradient(b_small).double() for _ in range(n)])
    big = torch.stack([gradient(b_big).double() for _ in range(n)])
    trace = small.var(dim=0, unbiased=True).sum().item() * b_small
    g2 = big.mean(dim=0).pow(2).sum().item() - trace / (n * b_big)
    return trace / g2


def valid_interleaved_float32(gradient, b_small, b_big, n):
    """Draws alternate between the two sizes, sums kept in float32, the closed form divided
    through by (b_big - b_small)."""
    s = big = 0.0
    for _ in range(n):
        s += float(gradient(b_small).pow(2).sum())
        big += float(gradient(b_big).pow(2).sum())
    s, big = s / n, big / n
    g2 = (b_big * big - b_small * s) / (b_big - b_small)
    trace = b_small * b_big * (s - big) / (b_big - b_small)
    return trace / g2


def wrong_big_norm_as_true(gradient, b_small, b_big, n):
    """tr(Sigma) solved right, but |G_big|^2 taken for |G|^2 (it still holds tr(Sigma)/b_big)."""
    s, big = _mean_sq(gradient, b_small, n), _mean_sq(gradient, b_big, n)
    return (s - big) / (1 / b_small - 1 / b_big) / big


def wrong_small_norm_as_trace(gradient, b_small, b_big, n):
    """|G|^2 solved right, but b_small |G_small|^2 taken for tr(Sigma) (it still holds
    b_small |G|^2)."""
    s, big = _mean_sq(gradient, b_small, n), _mean_sq(gradient, b_big, n)
    g2 = (b_big * big - b_small * s) / (b_big - b_small)
    return b_small * s / g2


def wrong_ratio_per_draw(gradient, b_small, b_big, n):
    """The estimate made from each pair of draws, then averaged: a mean of noisy ratios."""
    estimates = []
    for _ in range(n):
        s = gradient(b_small).double().pow(2).sum().item()
        big = gradient(b_big).double().pow(2).sum().item()
        g2 = (b_big * big - b_small * s) / (b_big - b_small)
        trace = (s - big) / (1 / b_small - 1 / b_big)
        estimates.append(trace / g2)
    return float(np.mean(estimates))


def wrong_norm_of_mean(gradient, b_small, b_big, n):
    """Gradients averaged over the n draws before squaring: the noise left is tr(Sigma)/(n b),
    so the 'trace' comes out n times too small."""
    s = torch.stack([gradient(b_small).double() for _ in range(n)]).mean(0).pow(2).sum().item()
    big = torch.stack([gradient(b_big).double() for _ in range(n)]).mean(0).pow(2).sum().item()
    g2 = (b_big * big - b_small * s) / (b_big - b_small)
    trace = (s - big) / (1 / b_small - 1 / b_big)
    return trace / g2


def wrong_norms_not_squared(gradient, b_small, b_big, n):
    """The identity applied to |G_B|, not |G_B|^2."""
    s = float(np.mean([gradient(b_small).norm().item() for _ in range(n)]))
    big = float(np.mean([gradient(b_big).norm().item() for _ in range(n)]))
    g2 = (b_big * big - b_small * s) / (b_big - b_small)
    trace = (s - big) / (1 / b_small - 1 / b_big)
    return trace / g2


def wrong_trace_without_batch_factor(gradient, b_small, b_big, n):
    """tr(Sigma) = |G_small|^2 - |G_big|^2: the 1/B factors forgotten."""
    s, big = _mean_sq(gradient, b_small, n), _mean_sq(gradient, b_big, n)
    g2 = (b_big * big - b_small * s) / (b_big - b_small)
    return (s - big) / g2


def wrong_small_minus_trace_over_big(gradient, b_small, b_big, n):
    """|G|^2 from the small batch with the big batch's noise subtracted: the sizes crossed."""
    s, big = _mean_sq(gradient, b_small, n), _mean_sq(gradient, b_big, n)
    trace = (s - big) / (1 / b_small - 1 / b_big)
    g2 = s - trace / b_big
    return trace / g2


NOISE_WRONG = r"relative error"  # no named shortcut fits these: the error, not a false cause
SHORTCUT = r"used as"
NOISE = [
    case(valid_linear_solve, "passed"),
    case(valid_sample_variance, "passed"),
    case(valid_interleaved_float32, "passed"),
    case(wrong_big_norm_as_true, names=r"\|G_big\|\^2 used as \|G\|\^2", not_names=r"G_small"),
    case(wrong_small_norm_as_trace, names=r"\|G_small\|\^2 used as tr", not_names=r"G_big"),
    case(wrong_ratio_per_draw, names=NOISE_WRONG, not_names=SHORTCUT),
    case(wrong_norm_of_mean, names=NOISE_WRONG, not_names=SHORTCUT),
    case(wrong_norms_not_squared, names=NOISE_WRONG, not_names=SHORTCUT),
    case(wrong_trace_without_batch_factor, names=NOISE_WRONG, not_names=SHORTCUT),
    case(wrong_small_minus_trace_over_big, names=NOISE_WRONG),
]
NOISE = in_ci(NOISE, {"valid-sample_variance", "wrong-big_norm_as_true"})


@pytest.mark.parametrize(("fn", "expect", "names", "not_names"), NOISE)
def test_noise_scale(fn, expect, names, not_names):
    noise_scale = fn
    assert_graded(grade(lesson02.check_noise_scale, noise_scale), expect, names, not_names)


# =============================================================================================
# 02b-trust-ratio: class LARS(torch.optim.Optimizer), its step completed
# =============================================================================================


def _lars(update):
    """A LARS class whose per-tensor update is `update(opt, group, p)` (the notebook's stub)."""

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

    LARS.__name__ = update.__name__
    return LARS


def _apply(opt, group, p, d, lr=None):
    buf = opt.state[p].setdefault("momentum_buffer", torch.zeros_like(p))
    buf.mul_(group["momentum"]).add_(d)
    p.sub_(buf, alpha=group["lr"] if lr is None else lr)


def _timm_ratio(group, p, with_eps=True):
    wd, eta = group["weight_decay"], group["trust_coef"]
    w, g = p.norm(), p.grad.norm()
    if w == 0 or g == 0:
        return 1.0
    return eta * w / (g + wd * w + (group["eps"] if with_eps else 0.0))


def _valid_where(opt, group, p):
    """The ratio with torch.where on the norms (no Python branch on a tensor), 1-D tensors
    by p.dim() < 2."""
    if p.dim() < 2:
        _apply(opt, group, p, p.grad)
        return
    wd, eta = group["weight_decay"], group["trust_coef"]
    w, g = p.norm(), p.grad.norm()
    ratio = torch.where(
        (w > 0) & (g > 0), eta * w / (g + wd * w + group["eps"]), torch.ones_like(w)
    )
    _apply(opt, group, p, (p.grad + wd * p) * ratio)


def _valid_sgd_buffer(opt, group, p):
    """The momentum buffer as torch.optim.SGD makes it: a clone of the first direction
    (the same as zeros * momentum + d), then mul_/add_."""
    d = p.grad.clone()
    if p.ndim > 1:
        d = d.add(p, alpha=group["weight_decay"]).mul_(_timm_ratio(group, p))
    state = opt.state[p]
    if "momentum_buffer" not in state:
        state["momentum_buffer"] = d.clone()
    else:
        state["momentum_buffer"].mul_(group["momentum"]).add_(d)
    p.add_(state["momentum_buffer"], alpha=-group["lr"])


def _valid_no_eps(opt, group, p):
    """The ratio without eps: the zero-norm rule already rules out a division by 0."""
    if p.ndim == 1:
        _apply(opt, group, p, p.grad)
        return
    _apply(opt, group, p, (p.grad + group["weight_decay"] * p) * _timm_ratio(group, p, False))


def _wrong_defaults_lr(opt, group, p):
    """Every fault fixed but the LR: read from opt.defaults, which no scheduler writes."""
    d = p.grad if p.ndim == 1 else (p.grad + group["weight_decay"] * p) * _timm_ratio(group, p)
    _apply(opt, group, p, d, lr=opt.defaults["lr"])


def _wrong_no_zero_rule(opt, group, p):
    """1-D exempt and the group's LR, but the colleague's ratio without timm's zero rule: the
    zero-initialised weight never moves."""
    if p.ndim == 1:
        _apply(opt, group, p, p.grad)
        return
    wd, eta = group["weight_decay"], group["trust_coef"]
    ratio = eta * p.norm() / (p.grad.norm() + wd * p.norm() + group["eps"])
    _apply(opt, group, p, (p.grad + wd * p) * ratio)


def _wrong_ratio_on_1d(opt, group, p):
    """Zero rule and the group's LR, but ratio and weight decay on every tensor, biases and
    the BatchNorm scale too."""
    _apply(opt, group, p, (p.grad + group["weight_decay"] * p) * _timm_ratio(group, p))


def _wrong_decay_only_in_ratio(opt, group, p):
    """Weight decay in the ratio's denominator only: the direction is the bare gradient."""
    if p.ndim == 1:
        _apply(opt, group, p, p.grad)
        return
    _apply(opt, group, p, p.grad * _timm_ratio(group, p))


def _wrong_ratio_ignores_decay(opt, group, p):
    """The ratio as eta |w| / |g| (no lambda |w| in the denominator), decay in the direction."""
    if p.ndim == 1:
        _apply(opt, group, p, p.grad)
        return
    w, g = p.norm(), p.grad.norm()
    ratio = 1.0 if w == 0 or g == 0 else group["trust_coef"] * w / g
    _apply(opt, group, p, (p.grad + group["weight_decay"] * p) * ratio)


def _wrong_lr_in_buffer(opt, group, p):
    """The paper's algorithm 1 literally: the LR multiplied into the buffer, which differs
    once the LR changes between steps (the warm-up)."""
    d = p.grad if p.ndim == 1 else (p.grad + group["weight_decay"] * p) * _timm_ratio(group, p)
    buf = opt.state[p].setdefault("momentum_buffer", torch.zeros_like(p))
    buf.mul_(group["momentum"]).add_(d, alpha=group["lr"])
    p.sub_(buf)


def _wrong_zero_rule_weight_only(opt, group, p):
    """Ratio 1 when |w| = 0, but not when |g| = 0: a weight without gradient gets
    eta / lambda, its weight decay rescaled."""
    if p.ndim == 1:
        _apply(opt, group, p, p.grad)
        return
    wd, eta = group["weight_decay"], group["trust_coef"]
    w = p.norm()
    ratio = 1.0 if w == 0 else eta * w / (p.grad.norm() + wd * w + group["eps"])
    _apply(opt, group, p, (p.grad + wd * p) * ratio)


def _wrong_adapt_by_group_decay(opt, group, p):
    """timm's Lars copied literally: ratio and decay wherever the group's weight_decay is not 0
    (timm's always_adapt=False), whatever the tensor's shape; 1-D tensors exempt only when
    their group has no weight decay."""
    if group["weight_decay"] == 0:
        _apply(opt, group, p, p.grad)
        return
    _apply(opt, group, p, (p.grad + group["weight_decay"] * p) * _timm_ratio(group, p))


def _wrong_larc_clip(opt, group, p):
    """NVIDIA LARC's clip of the ratio at 1 added (min(ratio, 1))."""
    if p.ndim == 1:
        _apply(opt, group, p, p.grad)
        return
    ratio = min(float(_timm_ratio(group, p)), 1.0)
    _apply(opt, group, p, (p.grad + group["weight_decay"] * p) * ratio)


def _trust_case(update, expect="failed", names=None, not_names=None):
    kind = "valid" if update.__name__.startswith("_valid_") else "wrong"
    name = update.__name__.split("_", 2)[2]
    return pytest.param(_lars(update), expect, names, not_names, id=f"{kind}-{name}")


TRUST = [
    _trust_case(_valid_where, "passed"),
    _trust_case(_valid_sgd_buffer, "passed"),
    _trust_case(_valid_no_eps, "passed"),
    _trust_case(
        _wrong_defaults_lr,
        names=r"defaults",
        not_names=r"no ratio 1|biases and BatchNorm parameters adapted",
    ),
    _trust_case(
        _wrong_no_zero_rule, names=r"zero|ratio 1|never mov|frozen", not_names=r"defaults|1-D"
    ),
    _trust_case(
        _wrong_ratio_on_1d,
        names=r"1-D|bias|norm(ali[sz]ation)? param|batchnorm",
        not_names=r"defaults|scheduler",
    ),
    _trust_case(_wrong_decay_only_in_ratio, names=r"decay missing from the update direction"),
    _trust_case(_wrong_ratio_ignores_decay, names=r"decay missing from the ratio"),
    _trust_case(_wrong_lr_in_buffer, names=r"LR multiplied into|buffer"),
    _trust_case(
        _wrong_zero_rule_weight_only, names=r"gradient|zero|ratio 1|decay|without", not_names=r"1-D"
    ),
    _trust_case(_wrong_adapt_by_group_decay, names=r"1-D|bias|BatchNorm|decay"),
    _trust_case(_wrong_larc_clip, names=r"clip|LARC", not_names=r"no ratio 1|defaults"),
]


@pytest.mark.parametrize(("LARS", "expect", "names", "not_names"), TRUST)
def test_trust_ratio(LARS, expect, names, not_names):
    assert_graded(grade(lesson02b.check_trust_ratio, LARS), expect, names, not_names)


# =============================================================================================
# 03-transfer: to_device(batch, device, mean, std) -> (float32 images, labels) on device
# =============================================================================================

_STATS: dict = {}


def _stats(device, mean, std, shape=(1, -1, 1, 1)):
    key = (str(device), tuple(float(m) for m in mean), tuple(float(s) for s in std))
    if key not in _STATS:
        m = torch.tensor(key[1], dtype=torch.float32).view(shape).to(device)
        s = torch.tensor(key[2], dtype=torch.float32).view(shape).to(device)
        _STATS[key] = (m, s)
    return _STATS[key]


_FUSED: dict = {}


def valid_fused_affine(batch, device, mean, std):
    """One multiply-add per batch: x * (1 / (255 std)) - mean / std, the two per-channel
    tensors made once per (device, mean, std) and kept in a dict."""
    x, y = batch
    key = (str(device), tuple(map(float, mean)), tuple(map(float, std)))
    if key not in _FUSED:
        m = torch.tensor(key[1], dtype=torch.float32)[:, None, None]
        s = torch.tensor(key[2], dtype=torch.float32)[:, None, None]
        _FUSED[key] = ((1 / (255 * s)).to(device), (-m / s).to(device))
    scale, shift = _FUSED[key]
    x = x.to(device, non_blocking=True).float()
    return torch.addcmul(shift, x, scale), y.to(device, non_blocking=True)


def valid_in_place_chain(batch, device, mean, std):
    """The conversion in place on the device: .to(float32) then div_, sub_, div_."""
    x, y = batch
    m, s = _stats(device, mean, std, shape=(-1, 1, 1))
    x = x.to(device, non_blocking=True).to(torch.float32)
    x.div_(255).sub_(m).div_(s)
    return x, y.to(device, non_blocking=True)


def valid_uint8_cast_first(batch, device, mean, std):
    """Copy with `Tensor.to(device=..., non_blocking=True)` by keyword, convert with
    torch.true_divide (a uint8 over 255.0 gives float32)."""
    x, y = batch
    m, s = _stats(device, mean, std)
    x = torch.true_divide(x.to(device=device, non_blocking=True), 255.0)
    return (x - m) / s, y.to(device=device, non_blocking=True)


def wrong_float_before_copy(batch, device, mean, std):
    """Converted and normalised on the host, then copied: four bytes per pixel cross."""
    x, y = batch
    m, s = _stats("cpu", mean, std)
    x = (x.float() / 255 - m) / s
    return x.to(device, non_blocking=True), y.to(device, non_blocking=True)


def valid_to_device_and_dtype(batch, device, mean, std):
    """One call, `.to(device, torch.float32, non_blocking=True)`. On CUDA the uint8 batch is
    what crosses: aten/src/ATen/native/cuda/Copy.cu, copy_kernel_cuda, "If non_blocking is
    true - type conversions are performed on the GPU" (a uint8 temporary is copied, then
    converted on the device); only a blocking copy converts on the CPU first."""
    x, y = batch
    m, s = _stats(device, mean, std)
    x = x.to(device, torch.float32, non_blocking=True) / 255
    return (x - m) / s, y.to(device, non_blocking=True)


def wrong_to_device_and_dtype_blocking(batch, device, mean, std):
    """The same call without non_blocking: a blocking copy that changes the dtype converts on
    the CPU ("to avoid allocating extra GPU memory"), so float32 crosses, and blocks."""
    x, y = batch
    m, s = _stats(device, mean, std)
    x = x.to(device, torch.float32) / 255
    return (x - m) / s, y.to(device)


def wrong_stats_per_batch(batch, device, mean, std):
    """mean and std made on the device on every call (torchvision's Normalize does it)."""
    x, y = batch
    m = torch.tensor(mean, device=device).view(1, -1, 1, 1)
    s = torch.tensor(std, device=device).view(1, -1, 1, 1)
    x = x.to(device, non_blocking=True).float() / 255
    return (x - m) / s, y.to(device, non_blocking=True)


def wrong_pin_per_batch(batch, device, mean, std):
    """.pin_memory() on every batch before the non_blocking copy."""
    x, y = batch
    m, s = _stats(device, mean, std)
    x = x.pin_memory().to(device, non_blocking=True).float() / 255
    return (x - m) / s, y.to(device, non_blocking=True)


def wrong_blocking_copy(batch, device, mean, std):
    """uint8 crosses and stats are cached, but a plain blocking .to(device)."""
    x, y = batch
    m, s = _stats(device, mean, std)
    x = x.to(device).float() / 255
    return (x - m) / s, y.to(device)


def wrong_no_divide_by_255(batch, device, mean, std):
    """ToTensor's division by 255 forgotten."""
    x, y = batch
    m, s = _stats(device, mean, std)
    x = x.to(device, non_blocking=True).float()
    return (x - m) / s, y.to(device, non_blocking=True)


_ONCE: list = []


def wrong_cache_ignores_stats(batch, device, mean, std):
    """Stats made once, on the first call, and reused whatever mean and std come next."""
    x, y = batch
    if not _ONCE:
        _ONCE.append(
            (
                torch.tensor(mean).view(1, -1, 1, 1).to(device),
                torch.tensor(std).view(1, -1, 1, 1).to(device),
            )
        )
    m, s = _ONCE[0]
    x = x.to(device, non_blocking=True).float() / 255
    return (x - m) / s, y.to(device, non_blocking=True)


def wrong_labels_on_host(batch, device, mean, std):
    """The images go to the device, the labels are returned as they came."""
    x, y = batch
    m, s = _stats(device, mean, std)
    x = x.to(device, non_blocking=True).float() / 255
    return (x - m) / s, y


_DOUBLE: dict = {}


def wrong_float64_stats(batch, device, mean, std):
    """Stats from numpy arrays (float64), cached on the device: the result is promoted to
    float64."""
    x, y = batch
    key = (str(device), tuple(mean), tuple(std))
    if key not in _DOUBLE:
        _DOUBLE[key] = (
            torch.as_tensor(np.asarray(mean)).view(1, -1, 1, 1).to(device),
            torch.as_tensor(np.asarray(std)).view(1, -1, 1, 1).to(device),
        )
    m, s = _DOUBLE[key]
    x = x.to(device, non_blocking=True).float() / 255
    return (x - m) / s, y.to(device, non_blocking=True)


def wrong_stats_broadcast_last_axis(batch, device, mean, std):
    """mean and std as (C,) tensors: they broadcast over the width, not the channels."""
    x, y = batch
    key = ("flat", str(device), tuple(mean), tuple(std))
    if key not in _STATS:
        _STATS[key] = (
            torch.tensor(mean, dtype=torch.float32).to(device),
            torch.tensor(std, dtype=torch.float32).to(device),
        )
    m, s = _STATS[key]
    x = x.to(device, non_blocking=True).float() / 255
    return (x - m) / s, y.to(device, non_blocking=True)


COPY_CAUSES = r"pin|non_blocking|blocking|float32|bytes|uint8|copy|once"
TRANSFER = [
    case(valid_fused_affine, "passed"),
    case(valid_in_place_chain, "passed"),
    case(valid_uint8_cast_first, "passed"),
    case(wrong_float_before_copy, names=r"uint8|bytes|float32|4x|four|after the copy"),
    case(valid_to_device_and_dtype, "passed"),
    case(wrong_to_device_and_dtype_blocking, names=r"float32|bytes|uint8|after the copy"),
    case(
        wrong_stats_per_batch,
        names=r"once|mean|std|every batch|each batch|per batch",
        not_names=r"after the copy|255",
    ),
    case(wrong_pin_per_batch, names=r"pin"),
    case(wrong_blocking_copy, names=r"non_blocking|blocking|async"),
    case(wrong_no_divide_by_255, names=r"255|ToTensor", not_names=r"pin|non_blocking|once"),
    case(wrong_cache_ignores_stats, names=r"mean|std|cache|ignore", not_names=r"255|pin"),
    case(wrong_labels_on_host, names=r"label", not_names=r"255|pin"),
    case(
        wrong_float64_stats,
        names=r"float32|dtype",
        not_names=r"difference[^|]*measured inf|255|pin",
    ),
    case(
        wrong_stats_broadcast_last_axis,
        names=r"shape|broadcast|channel|size|mean|std|values|differ",
        not_names=r"pin_memory",
    ),
]


TRANSFER_HOLES: dict = {}  # closed: the GPU question (non_blocking converts on the device), float64 named
TRANSFER = open_holes(TRANSFER, TRANSFER_HOLES)


@pytest.mark.parametrize(("fn", "expect", "names", "not_names"), TRANSFER)
def test_transfer(fn, expect, names, not_names):
    to_device = fn
    assert_graded(grade(lesson03.check_transfer, to_device), expect, names, not_names)


# =============================================================================================
# 04-loss-scale: rescued_grads(model, x, y) -> list of float32 gradients
# =============================================================================================

FP16 = torch.finfo(torch.float16)


def _scaled_backward(model, x, y, scale):
    for p in model.parameters():
        p.grad = None
    with torch.autocast("cpu", dtype=torch.float16):
        loss = F.mse_loss(model(x), y)
    (loss.float() * scale).backward()
    return [p.grad.float() for p in model.parameters()]


def valid_static_2_14(model, x, y):
    """One fixed scale, 2**14, which the threshold's evidence says suits both snapshots."""
    return [g / 2**14 for g in _scaled_backward(model, x, y, 2.0**14)]


def valid_autograd_grad_backoff(model, x, y):
    """torch.autograd.grad (no .grad to clear), the scale halved from 2**24 until every
    gradient is finite; unscaled in float32."""
    params = list(model.parameters())
    scale = 2.0**24
    while scale >= 1:
        with torch.autocast("cpu", dtype=torch.float16):
            loss = F.mse_loss(model(x), y)
        grads = torch.autograd.grad(loss * scale, params)
        if all(torch.isfinite(g).all() for g in grads):
            return [g.float() / scale for g in grads]
        scale /= 2
    raise RuntimeError("no finite scale")


def valid_scale_from_probe(model, x, y):
    """A first backward at scale 1 measures the largest gradient; the scale puts it at a
    quarter of fp16's max (a power of two), checked finite, else halved."""
    grads = _scaled_backward(model, x, y, 1.0)
    top = max(g.abs().max().item() for g in grads)
    scale = 2.0 ** int(np.floor(np.log2(FP16.max / 4 / max(top, 1e-30))))
    scale = min(scale, 2.0**24)
    while True:
        grads = _scaled_backward(model, x, y, scale)
        if all(torch.isfinite(g).all() for g in grads):
            return [g / scale for g in grads]
        scale /= 2


def wrong_not_unscaled(model, x, y):
    """Scaled by 2**14 and returned as is: gradients 2**14 times too large."""
    return _scaled_backward(model, x, y, 2.0**14)


def wrong_static_2_16(model, x, y):
    """GradScaler's initial 2**16 as a fixed scale: the early snapshot overflows."""
    return [g / 2**16 for g in _scaled_backward(model, x, y, 2.0**16)]


def wrong_static_2_8(model, x, y):
    """A timid fixed 2**8: the late snapshot's small gradients still flush."""
    return [g / 2**8 for g in _scaled_backward(model, x, y, 2.0**8)]


def wrong_no_scaling(model, x, y):
    """Autocast and backward, no scale at all."""
    return _scaled_backward(model, x, y, 1.0)


def wrong_backoff_without_zeroing(model, x, y):
    """Dynamic back-off from 2**16, but .grad never cleared: the overflowed try's inf (and
    every earlier try) stays in .grad and backward adds to it."""
    scale = 2.0**16
    for _ in range(30):
        with torch.autocast("cpu", dtype=torch.float16):
            loss = F.mse_loss(model(x), y)
        (loss * scale).backward()
        grads = [p.grad.float() for p in model.parameters()]
        if all(torch.isfinite(g).all() for g in grads):
            return [g / scale for g in grads]
        scale /= 2
    return [g / scale for g in grads]


def wrong_keeps_incoming_grad(model, x, y):
    """Static 2**14, unscaled, but the model's incoming .grad not cleared first."""
    with torch.autocast("cpu", dtype=torch.float16):
        loss = F.mse_loss(model(x), y)
    (loss * 2.0**14).backward()
    return [p.grad.float() / 2**14 for p in model.parameters()]


def wrong_returns_fp16(model, x, y):
    """Right values, returned as float16 ("the model ran in fp16")."""
    return [g.half() for g in valid_autograd_grad_backoff(model, x, y)]


def wrong_float32_forward(model, x, y):
    """No autocast at all: float32 gradients, exact, but not what was asked."""
    for p in model.parameters():
        p.grad = None
    F.mse_loss(model(x), y).backward()
    return [p.grad.float() for p in model.parameters()]


def wrong_unscale_in_fp16(model, x, y):
    """Static 2**14, but the division done in float16 ("the model is fp16"): the late
    snapshot's small gradients underflow again, then go back to float32."""
    return [(g.half() / 2**14).float() for g in _scaled_backward(model, x, y, 2.0**14)]


def wrong_grow_off_by_one(model, x, y):
    """Scale doubled from 1 while the gradients stay finite, but the loop returns the try it
    stopped on: the first one that overflowed (off by one)."""
    scale = 1.0
    while True:
        grads = _scaled_backward(model, x, y, scale)
        if not all(torch.isfinite(g).all() for g in grads) or scale >= 2.0**40:
            return [g / scale for g in grads]
        scale *= 2


def wrong_divides_loss(model, x, y):
    """The loss divided by the scale instead of multiplied, then the gradients multiplied."""
    return [g * 2**14 for g in _scaled_backward(model, x, y, 2.0**-14)]


LOSS_SCALE = [
    case(valid_static_2_14, "passed"),
    case(valid_autograd_grad_backoff, "passed"),
    case(valid_scale_from_probe, "passed"),
    case(wrong_not_unscaled, names=r"unscal|divide|scale|times", not_names=r"inf|nan|float16 ran"),
    case(wrong_static_2_16, names=r"inf|nan|overflow|too large|finite"),
    case(wrong_static_2_8, names=r"small|underflow|flush|zero|too small|bits|scale"),
    case(wrong_no_scaling, names=r"scal|underflow|flush|zero"),
    case(wrong_backoff_without_zeroing, names=r"\.grad|accumulat|inf|nan|clear|zero|left"),
    case(wrong_keeps_incoming_grad, names=r"\.grad|accumulat|clear|zero|incoming|twice|agree"),
    case(wrong_returns_fp16, names=r"float32|float16|dtype"),
    case(wrong_float32_forward, names=r"float16|autocast|fp16"),
    case(wrong_unscale_in_fp16, names=r"float16|fp16|float32|underflow", not_names=r"inf|\.grad"),
    case(wrong_grow_off_by_one, names=r"inf|nan|overflow", not_names=r"\.grad|float16 grad"),
    case(
        wrong_divides_loss,
        names=r"underflow|flush|below 1|too small|multiply",
        not_names=r"divide the gradients by that scale",
    ),
]


LOSS_SCALE_HOLES: dict = {}  # closed: a scale below 1 is named (the loss divided)
LOSS_SCALE = open_holes(LOSS_SCALE, LOSS_SCALE_HOLES)
LOSS_SCALE = in_ci(  # the back-off that never clears .grad tries 30 scales: about 12 s
    LOSS_SCALE, {p.id for p in LOSS_SCALE if p.id != "wrong-backoff_without_zeroing"}
)


@pytest.mark.parametrize(("fn", "expect", "names", "not_names"), LOSS_SCALE)
def test_loss_scale(fn, expect, names, not_names):
    rescued_grads = fn
    assert_graded(grade(lesson04.check_loss_scale, rescued_grads), expect, names, not_names)
