"""Blind red team for lesson 17's checks: 17-fused-softmax, 17-flash-forward and
17-predict-traffic.

Written from the learner notebook alone (`notebooks/17_triton_kernels.ipynb`: exercise text,
hints, stubs, the colleagues' kernels, what it shows with `cu.show_source`: `naive_attention`,
`MovedBytes`), the signatures and docstrings a learner reads with `help()` (`lesson.Shape`,
`lesson.moved_bytes`, `lesson.attention_inputs`, `lesson.sdpa`, the check functions), the
limits `cu.show_limits` prints (`lesson.THRESHOLDS`), the output of `lesson.operator_table` and
`lesson.moved_bytes` on small shapes, the README, docs/glossary.md and `redteam_helpers.py`;
never the lesson's checks, probes, references or tests, nor the other red-team files. Each case
is a learner answer with the verdict it deserves and, for a wrong one, the cause the failing
parts must name (`names`) and a cause they must not name (`not_names`), both regexes. Each
check is called as its notebook's check cell calls it. Cases the check gets wrong stay, marked
with `open_holes` (strict xfail). The regexes were written before the first run; after it,
words that the specimens' own names hold ("causal", "slice", "tiles", "bfloat16") were taken
out of them, since every failing part repeats its specimen's name. The kernels sit at the
module's top level: Triton's interpreter reads their source.

Not cases: a softmax whose store is not masked, and one that stores with the input's row stride
into a packed output. Both write past the output's end, and in the interpreter that corrupts the
heap (the process aborts: "double free or corruption", "free(): invalid size").
Checked by hand beside the holes: padded lanes loaded as -100 are off by 0.89 on rows of 37 near
-300, and the flash kernel without .contiguous() by 2.5 on a transposed (B, T, H, D) input
(the strided valid kernel: 2.4e-7).

Run: COURSE_QUICK=1 COURSE_REDTEAM=all pytest -q -p no:cacheprovider
tests/redteam/test_17_blind.py: 40 cases, 25 passed and 15 xfailed (open holes) in 17-24 s
wall on a shared 2-core CPU; without COURSE_REDTEAM (CI: 2 cases per check) 6 passed in 6-7 s.
"""

from __future__ import annotations

import math
import os

os.environ.setdefault("COURSE_QUICK", "1")

import pytest
import torch
from redteam_helpers import assert_graded, case, grade, in_ci, open_holes

from course_utils.lessons import kernels as lesson

pytest.importorskip("triton")
triton, tl = lesson.load_triton()  # sets TRITON_INTERPRET before any kernel below is decorated
DEVICE = lesson.kernel_device()

# =============================================================================================
# 17-fused-softmax: softmax(x) of a 2-D float32 tensor, one program per row
# =============================================================================================


@triton.jit
def softmax_neg_inf_kernel(X, Y, n_cols, x_stride, y_stride, BLOCK: tl.constexpr):
    """The fix the notebook points at: padded lanes loaded as -inf, store masked."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    inside = cols < n_cols
    x = tl.load(X + row * x_stride + cols, mask=inside, other=-float("inf"))
    num = tl.exp(x - tl.max(x, axis=0))
    tl.store(Y + row * y_stride + cols, num / tl.sum(num, axis=0), mask=inside)


@triton.jit
def softmax_where_kernel(X, Y, n_cols, x_stride, y_stride, BLOCK: tl.constexpr):
    """Padded lanes loaded as 0.0, then kept out of the max and the sum with tl.where."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    inside = cols < n_cols
    x = tl.load(X + row * x_stride + cols, mask=inside, other=0.0)
    row_max = tl.max(tl.where(inside, x, -float("inf")), axis=0)
    num = tl.where(inside, tl.exp(x - row_max), 0.0)
    tl.store(Y + row * y_stride + cols, num / tl.sum(num, axis=0), mask=inside)


@triton.jit
def softmax_three_pass_kernel(X, Y, n_cols, x_stride, y_stride, BLOCK: tl.constexpr):
    """A fixed BLOCK smaller than the row: one pass for the max, one for the sum, one to write."""
    row = tl.program_id(0)
    lanes = tl.arange(0, BLOCK)
    row_max = -float("inf")
    for start in range(0, n_cols, BLOCK):
        cols = start + lanes
        x = tl.load(X + row * x_stride + cols, mask=cols < n_cols, other=-float("inf"))
        row_max = tl.maximum(row_max, tl.max(x, axis=0))
    total = 0.0
    for start in range(0, n_cols, BLOCK):
        cols = start + lanes
        x = tl.load(X + row * x_stride + cols, mask=cols < n_cols, other=-float("inf"))
        total += tl.sum(tl.exp(x - row_max), axis=0)
    for start in range(0, n_cols, BLOCK):
        cols = start + lanes
        x = tl.load(X + row * x_stride + cols, mask=cols < n_cols, other=-float("inf"))
        tl.store(Y + row * y_stride + cols, tl.exp(x - row_max) / total, mask=cols < n_cols)


@triton.jit
def softmax_online_kernel(X, Y, n_cols, x_stride, y_stride, BLOCK: tl.constexpr):
    """Two passes: an online max and rescaled sum over blocks, then the write."""
    row = tl.program_id(0)
    lanes = tl.arange(0, BLOCK)
    m = -float("inf")
    total = 0.0
    for start in range(0, n_cols, BLOCK):
        cols = start + lanes
        x = tl.load(X + row * x_stride + cols, mask=cols < n_cols, other=-float("inf"))
        m_new = tl.maximum(m, tl.max(x, axis=0))
        total = total * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new), axis=0)
        m = m_new
    for start in range(0, n_cols, BLOCK):
        cols = start + lanes
        x = tl.load(X + row * x_stride + cols, mask=cols < n_cols, other=-float("inf"))
        tl.store(Y + row * y_stride + cols, tl.exp(x - m) / total, mask=cols < n_cols)


@triton.jit
def softmax_packed_kernel(X, Y, n_cols, BLOCK: tl.constexpr):
    """Rows assumed packed: the row's start is row * n_cols, in X as in Y."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    inside = cols < n_cols
    x = tl.load(X + row * n_cols + cols, mask=inside, other=-float("inf"))
    num = tl.exp(x - tl.max(x, axis=0))
    tl.store(Y + row * n_cols + cols, num / tl.sum(num, axis=0), mask=inside)


@triton.jit
def softmax_other_kernel(
    X, Y, n_cols, x_stride, y_stride, OTHER: tl.constexpr, BLOCK: tl.constexpr
):
    """The colleague's kernel with padded lanes loaded as OTHER (0.0 there)."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    inside = cols < n_cols
    x = tl.load(X + row * x_stride + cols, mask=inside, other=OTHER)
    num = tl.exp(x - tl.max(x, axis=0))
    tl.store(Y + row * y_stride + cols, num / tl.sum(num, axis=0), mask=inside)


@triton.jit
def softmax_no_max_kernel(X, Y, n_cols, x_stride, y_stride, BLOCK: tl.constexpr):
    """Padded lanes right (-inf), but exp of the raw entries: inf on entries in the hundreds."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    inside = cols < n_cols
    x = tl.load(X + row * x_stride + cols, mask=inside, other=-float("inf"))
    num = tl.exp(x)
    tl.store(Y + row * y_stride + cols, num / tl.sum(num, axis=0), mask=inside)


@triton.jit
def softmax_axis1_kernel(X, Y, n_cols, x_stride, y_stride, BLOCK: tl.constexpr):
    """Launched on a (1, rows) grid but reads program_id(0): every program does row 0."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    inside = cols < n_cols
    x = tl.load(X + row * x_stride + cols, mask=inside, other=-float("inf"))
    num = tl.exp(x - tl.max(x, axis=0))
    tl.store(Y + row * y_stride + cols, num / tl.sum(num, axis=0), mask=inside)


def _launch(kernel, x, block, **extra):
    """One program per row, strides as the tensors have them; the usual launcher."""
    y = torch.empty_like(x)
    kernel[(x.shape[0],)](x, y, x.shape[1], x.stride(0), y.stride(0), **extra, BLOCK=block)
    return y


def valid_neg_inf(x):
    return _launch(softmax_neg_inf_kernel, x, triton.next_power_of_2(x.shape[1]))


def valid_where_zero_exp(x):
    return _launch(softmax_where_kernel, x, triton.next_power_of_2(x.shape[1]))


def valid_three_pass_block_32(x):
    return _launch(softmax_three_pass_kernel, x, 32)


def valid_online_block_16(x):
    return _launch(softmax_online_kernel, x, 16)


def valid_contiguous_copy(x):
    """Packs the rows first (a copy of a slice), then the kernel may take row * n_cols."""
    x = x.contiguous()
    y = torch.empty_like(x)
    softmax_packed_kernel[(x.shape[0],)](x, y, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
    return y


def wrong_other_zero(x):
    """The colleague's kernel as it is: padded lanes add exp(0 - max) to each row's sum."""
    return _launch(softmax_other_kernel, x, triton.next_power_of_2(x.shape[1]), OTHER=0.0)


def wrong_other_minus_100(x):
    """Padded lanes loaded as -100, "small enough": the max of a row of numbers below -100."""
    return _launch(softmax_other_kernel, x, triton.next_power_of_2(x.shape[1]), OTHER=-100.0)


def wrong_no_max(x):
    return _launch(softmax_no_max_kernel, x, triton.next_power_of_2(x.shape[1]))


def wrong_ignores_stride(x):
    """Strides dropped: right on packed rows, reads the wrong elements of a slice."""
    y = torch.empty_like(x)
    softmax_packed_kernel[(x.shape[0],)](x, y, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
    return y


def wrong_block_below_length(x):
    """BLOCK the power of two at or below the row's length: the row's tail is never written."""
    return _launch(softmax_neg_inf_kernel, x, 2 ** int(math.log2(x.shape[1])))


def wrong_grid_on_axis_1(x):
    y = torch.empty_like(x)
    block = triton.next_power_of_2(x.shape[1])
    grid = (1, x.shape[0])
    softmax_axis1_kernel[grid](x, y, x.shape[1], x.stride(0), y.stride(0), BLOCK=block)
    return y


# Every failing part names its specimen ("rows of 100", "entries up to 400 (exp overflows
# without the max)", "a slice of a wider tensor (row stride > length)"): the regexes look for
# the diagnosis, not for words the specimens' names already hold.
NO_MAX = r"without the row's max|max subtracted"
PADDED = r"loaded as|padded lanes"
SOFTMAX = [
    case(valid_neg_inf, "passed"),
    case(valid_where_zero_exp, "passed"),
    case(valid_three_pass_block_32, "passed"),
    case(valid_online_block_16, "passed"),
    case(valid_contiguous_copy, "passed"),
    case(wrong_other_zero, names=PADDED + r"|other", not_names=NO_MAX),
    case(wrong_other_minus_100, names=PADDED + r"|other", not_names=NO_MAX),
    case(wrong_no_max, names=NO_MAX, not_names=PADDED),
    case(wrong_ignores_stride, names=r"stride|slice", not_names=PADDED + "|" + NO_MAX),
    case(
        wrong_block_below_length,
        names=r"lane|power-of-two length|BLOCK",
        not_names=PADDED + "|" + NO_MAX,
    ),
    case(wrong_grid_on_axis_1, names=r"program|grid", not_names=PADDED + "|" + NO_MAX),
]
SOFTMAX_HOLES = {}
SOFTMAX = open_holes(SOFTMAX, SOFTMAX_HOLES)
SOFTMAX = in_ci(SOFTMAX, {"valid-neg_inf", "wrong-other_zero"})


@pytest.mark.parametrize(("fn", "expect", "names", "not_names"), SOFTMAX)
def test_fused_softmax(fn, expect, names, not_names):
    softmax = fn
    assert_graded(grade(lesson.check_fused_softmax, softmax), expect, names, not_names)


# =============================================================================================
# 17-flash-forward: attention(q, k, v), causal, float32 (B, H, T, D)
# =============================================================================================


@triton.jit
def flash_kernel(
    Q,
    K,
    V,
    Out,
    T,
    scale,
    D: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    RESCALE_ACC: tl.constexpr,
    RESCALE_L: tl.constexpr,
    DIAGONAL: tl.constexpr,
    CAUSAL: tl.constexpr,
    KEY_END: tl.constexpr,
):
    """The colleague's kernel (q, k, v contiguous) with each decision a learner gets wrong as a
    switch: RESCALE_ACC / RESCALE_L (multiply by alpha when the max grows), DIAGONAL (a query
    sees its own key), CAUSAL (mask the future), KEY_END (0: up to the last query's tile,
    as written there; 1: stop before the program's own tile; 2: up to start_m + 1;
    3: every key tile)."""
    start_m = tl.program_id(0) * BLOCK_M
    base = tl.program_id(1) * T * D
    rows, dims = start_m + tl.arange(0, BLOCK_M), tl.arange(0, D)
    q = tl.load(Q + base + rows[:, None] * D + dims[None, :], mask=rows[:, None] < T, other=0.0)
    m_i = tl.full([BLOCK_M], -float("inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    end = start_m + BLOCK_M
    if KEY_END == 1:
        end = start_m
    if KEY_END == 2:
        end = start_m + 1
    if KEY_END == 3:
        end = T
    for start_n in range(0, end, BLOCK_N):
        cols = start_n + tl.arange(0, BLOCK_N)
        k = tl.load(K + base + cols[:, None] * D + dims[None, :], mask=cols[:, None] < T, other=0.0)
        v = tl.load(V + base + cols[:, None] * D + dims[None, :], mask=cols[:, None] < T, other=0.0)
        s = tl.dot(q, tl.trans(k)) * scale
        if CAUSAL:
            if DIAGONAL:
                s = tl.where(rows[:, None] >= cols[None, :], s, -float("inf"))
            else:
                s = tl.where(rows[:, None] > cols[None, :], s, -float("inf"))
        else:  # keys past T still masked: only the future is let in
            s = tl.where(cols[None, :] < T, s, -float("inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(s - m_new[:, None])
        if RESCALE_L:
            l_i = l_i * alpha
        l_i = l_i + tl.sum(p, axis=1)
        if RESCALE_ACC:
            acc = acc * alpha[:, None]
        acc = acc + tl.dot(p, v)
        m_i = m_new
    out = acc / l_i[:, None]
    tl.store(Out + base + rows[:, None] * D + dims[None, :], out, mask=rows[:, None] < T)


@triton.jit
def flash_strided_kernel(
    Q,
    K,
    V,
    Out,
    T,
    scale,
    sb,
    sh,
    st,
    ob,
    oh,
    ot,
    H,
    D: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    """Any layout: q, k, v share strides (sb, sh, st, 1), the output has its own; base-2
    exponentials with log2(e) folded into the scale, as Triton's tutorial does."""
    start_m = tl.program_id(0) * BLOCK_M
    b, h = tl.program_id(1) // H, tl.program_id(1) % H
    rows, dims = start_m + tl.arange(0, BLOCK_M), tl.arange(0, D)
    offs = b * sb + h * sh
    q = tl.load(Q + offs + rows[:, None] * st + dims[None, :], mask=rows[:, None] < T, other=0.0)
    m_i = tl.full([BLOCK_M], -float("inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    qk_scale = scale * 1.4426950408889634  # log2(e)
    for start_n in range(0, start_m + BLOCK_M, BLOCK_N):
        cols = start_n + tl.arange(0, BLOCK_N)
        kv_offs = offs + cols[:, None] * st + dims[None, :]
        k = tl.load(K + kv_offs, mask=cols[:, None] < T, other=0.0)
        v = tl.load(V + kv_offs, mask=cols[:, None] < T, other=0.0)
        s = tl.dot(q, tl.trans(k)) * qk_scale
        s = tl.where(rows[:, None] >= cols[None, :], s, -float("inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p, v)
        m_i = m_new
    out_offs = b * ob + h * oh + rows[:, None] * ot + dims[None, :]
    tl.store(Out + out_offs, acc / l_i[:, None], mask=rows[:, None] < T)


@triton.jit
def flash_normalised_kernel(
    Q, K, V, Out, T, scale, D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr
):
    """FlashAttention-1's bookkeeping: the accumulator stays normalised after every tile."""
    start_m = tl.program_id(0) * BLOCK_M
    base = tl.program_id(1) * T * D
    rows, dims = start_m + tl.arange(0, BLOCK_M), tl.arange(0, D)
    q = tl.load(Q + base + rows[:, None] * D + dims[None, :], mask=rows[:, None] < T, other=0.0)
    m_i = tl.full([BLOCK_M], -float("inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, D], tl.float32)
    for start_n in range(0, start_m + BLOCK_M, BLOCK_N):
        cols = start_n + tl.arange(0, BLOCK_N)
        k = tl.load(K + base + cols[:, None] * D + dims[None, :], mask=cols[:, None] < T, other=0.0)
        v = tl.load(V + base + cols[:, None] * D + dims[None, :], mask=cols[:, None] < T, other=0.0)
        s = tl.dot(q, tl.trans(k)) * scale
        s = tl.where(rows[:, None] >= cols[None, :], s, -float("inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        p = tl.exp(s - m_new[:, None])
        l_new = l_i * tl.exp(m_i - m_new) + tl.sum(p, axis=1)
        acc = acc * (l_i * tl.exp(m_i - m_new) / l_new)[:, None] + tl.dot(p, v) / l_new[:, None]
        l_i, m_i = l_new, m_new
    tl.store(Out + base + rows[:, None] * D + dims[None, :], acc, mask=rows[:, None] < T)


def _flash(
    q, k, v, block_m=32, block_n=32, contiguous=True, heads_only=False, scaled=True, **mistakes
):
    """The colleague's launcher around `flash_kernel`; every default is the fixed answer."""
    B, H, T, D = q.shape
    if contiguous:
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    out = torch.empty_like(q)
    grid = (triton.cdiv(T, block_m), H if heads_only else B * H)
    switches = {
        "RESCALE_ACC": True,
        "RESCALE_L": True,
        "DIAGONAL": True,
        "CAUSAL": True,
        "KEY_END": 0,
        **mistakes,
    }
    flash_kernel[grid](
        q,
        k,
        v,
        out,
        T,
        D**-0.5 if scaled else 1.0,
        D=D,
        BLOCK_M=block_m,
        BLOCK_N=block_n,
        **switches,
    )
    return out


def valid_rescaled(q, k, v):
    """The colleague's kernel with `acc * alpha`, tiles of 32 x 32."""
    return _flash(q, k, v)


def valid_small_query_tiles(q, k, v):
    """Tiles of 16 queries x 64 keys: the loop reaches past the program's last query."""
    return _flash(q, k, v, block_m=16, block_n=64)


def valid_every_key_tile(q, k, v):
    """No early stop: every key tile, the future masked by tl.where (slower, same values)."""
    return _flash(q, k, v, block_m=32, block_n=16, KEY_END=3)


def valid_strided_exp2(q, k, v):
    """No copies: the strides of any layout, tiles of 64 x 16, base-2 exponentials."""
    B, H, T, D = q.shape
    if not (k.stride() == q.stride() == v.stride() and q.stride(-1) == 1):
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    out = torch.empty(B, H, T, D, device=q.device, dtype=q.dtype)
    grid = (triton.cdiv(T, 64), B * H)
    flash_strided_kernel[grid](
        q, k, v, out, T, D**-0.5, *q.stride()[:3], *out.stride()[:3], H, D=D, BLOCK_M=64, BLOCK_N=16
    )
    return out


def valid_normalised_every_tile(q, k, v):
    B, H, T, D = q.shape
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    out = torch.empty_like(q)
    grid = (triton.cdiv(T, 16), B * H)
    flash_normalised_kernel[grid](q, k, v, out, T, D**-0.5, D=D, BLOCK_M=16, BLOCK_N=32)
    return out


def wrong_no_acc_rescale(q, k, v):
    """The colleague's kernel as it is: l_i rescaled, acc not."""
    return _flash(q, k, v, RESCALE_ACC=False)


def wrong_no_rescale(q, k, v):
    """Neither l_i nor acc follows the max: both sums mix units."""
    return _flash(q, k, v, RESCALE_ACC=False, RESCALE_L=False)


def wrong_no_acc_rescale_big_key_tiles(q, k, v):
    """acc not rescaled, but 64-key tiles: the max grows across tiles less often."""
    return _flash(q, k, v, block_m=64, block_n=64, RESCALE_ACC=False)


def wrong_no_sqrt_d(q, k, v):
    """Scores q @ k^T, not divided by sqrt(D)."""
    return _flash(q, k, v, scaled=False)


def wrong_strict_causal(q, k, v):
    """rows > cols: a query does not see its own key (row 0 sees none: nan)."""
    return _flash(q, k, v, DIAGONAL=False)


def wrong_not_causal(q, k, v):
    """Every key tile, no causal mask: each query sees the future."""
    return _flash(q, k, v, CAUSAL=False, KEY_END=3)


def wrong_stops_before_diagonal(q, k, v):
    """range(0, start_m, BLOCK_N): the program's own tile never visited."""
    return _flash(q, k, v, KEY_END=1)


def wrong_loop_to_first_query(q, k, v):
    """range(0, start_m + 1, BLOCK_N) with 64 queries x 16 keys: the diagonal tile's later keys
    are skipped (invisible with equal tiles)."""
    return _flash(q, k, v, block_m=64, block_n=16, KEY_END=2)


def wrong_ignores_strides(q, k, v):
    """No .contiguous(): the kernel's `T * D` layout read from whatever strides q has."""
    return _flash(q, k, v, contiguous=False)


def wrong_grid_heads_only(q, k, v):
    """A grid of (query tiles, H): only batch 0 computed, the others left as empty_like's."""
    return _flash(q, k, v, heads_only=True)


# Every failing part says "SDPA (causal)" and its specimen ("the max growing along the keys"):
# the regexes look for the diagnosis. RESCALE is the diagnosis of a missing rescale.
RESCALE = r"rescal|m_i grows|acc \* alpha"
NOT_RESCALE = r"sqrt|stride|contiguous|causal mask|diagonal"
FLASH = [
    case(valid_rescaled, "passed"),
    case(valid_small_query_tiles, "passed"),
    case(valid_every_key_tile, "passed"),
    case(valid_strided_exp2, "passed"),
    case(valid_normalised_every_tile, "passed"),
    case(wrong_no_acc_rescale, names=r"accumulator|acc \* alpha", not_names=NOT_RESCALE),
    case(wrong_no_rescale, names=r"running sum|rescal", not_names=NOT_RESCALE),
    case(
        wrong_no_acc_rescale_big_key_tiles,
        names=r"accumulator|acc \* alpha",
        not_names=NOT_RESCALE,
    ),
    case(wrong_no_sqrt_d, names=r"sqrt|\bscal(e|ed|ing)\b|D ?\*\* ?-0\.5", not_names=RESCALE),
    case(wrong_strict_causal, names=r"diagonal|own key|itself|\bmask", not_names=RESCALE),
    case(wrong_not_causal, names=r"future|later keys|\bmask", not_names=RESCALE),
    case(wrong_stops_before_diagonal, names=r"diagonal|own tile|loop|nan", not_names=RESCALE),
    case(wrong_loop_to_first_query, names=r"diagonal|loop|key tiles?\b|BLOCK_N", not_names=RESCALE),
    case(wrong_ignores_strides, names=r"stride|contiguous|layout|transpos", not_names=RESCALE),
    case(wrong_grid_heads_only, names=r"batch|grid|program_id", not_names=RESCALE),
]
# The flash check's fallback for a mistake no replay matches (it blamed the rescale at first;
# now it says what it compared): no cause named.
BLAMES_RESCALE = "is told only that it 'matches none of the mistakes replayed here'"
FLASH_HOLES = {}
FLASH = open_holes(FLASH, FLASH_HOLES)
FLASH = in_ci(FLASH, {"valid-rescaled", "wrong-no_acc_rescale"})


@pytest.mark.parametrize(("fn", "expect", "names", "not_names"), FLASH)
def test_flash_forward(fn, expect, names, not_names):
    attention = fn
    assert_graded(grade(lesson.check_flash_forward, attention), expect, names, not_names)


# =============================================================================================
# 17-predict-traffic: predict_traffic(shape) -> {"naive": bytes, "fused": bytes}
# =============================================================================================


def _naive(s, e, mask_bytes=None, score_moves=6, qkv_moves=6):
    """naive_attention's operators: q*scale (q in, q out), q@k^T (2 in, scores out), masked_fill
    (scores and the bool mask in, scores out), softmax (in, out), probs@v (probs and v in, out
    out): 6 moves of the scores, 6 of a (B, H, T, D) tensor, the (T, T) mask once."""
    bh_td, bh_tt = s.B * s.H * s.T * s.D, s.B * s.H * s.T * s.T
    mask = s.T * s.T if mask_bytes is None else mask_bytes
    return qkv_moves * bh_td * e + score_moves * bh_tt * e + mask


def _fused_by_program(s, e, kv_tiles=None, rows_of=None, with_out=True):
    """Exercise 2's grid, program by program: its q rows (and out rows) inside T, and for each
    key tile its loop visits, the K and V rows inside T. `kv_tiles(start_m)` gives the tiles'
    starts, `rows_of(start, block)` the rows a tile's masked load reads."""
    kv_tiles = kv_tiles or (lambda start_m: range(0, start_m + s.block_m, s.block_n))
    rows_of = rows_of or (lambda start, block: max(0, min(block, s.T - start)))
    total = 0
    for start_m in range(0, s.T, s.block_m):
        q_rows = rows_of(start_m, s.block_m)
        total += q_rows * (2 if with_out else 1)
        total += sum(2 * rows_of(start_n, s.block_n) for start_n in kv_tiles(start_m))
    return s.B * s.H * total * s.D * e


def valid_tile_by_tile(shape):
    e = shape.element_bytes
    return {"naive": _naive(shape, e), "fused": _fused_by_program(shape, e)}


def valid_closed_form(shape):
    """Per query tile: its rows twice (q, out), and the keys of ceil(reach / block_n) key tiles,
    cut at T, twice (k, v); element size from torch."""
    B, H, T, D, bm, bn = shape.B, shape.H, shape.T, shape.D, shape.block_m, shape.block_n
    e = torch.empty(0, dtype=getattr(torch, shape.dtype)).element_size()
    naive = 6 * B * H * T * D * e + 6 * B * H * T * T * e + T * T
    keys_read = sum(min(T, math.ceil((i + bm) / bn) * bn) for i in range(0, T, bm))
    fused = B * H * D * e * (2 * T + 2 * keys_read)
    return {"naive": naive, "fused": fused}


def wrong_no_mask_buffer(shape):
    e = shape.element_bytes
    return {"naive": _naive(shape, e, mask_bytes=0), "fused": _fused_by_program(shape, e)}


def wrong_mask_in_dtype(shape):
    """The (T, T) mask counted in the attention's dtype, not as one byte per bool."""
    e = shape.element_bytes
    mask = shape.T * shape.T * e
    return {"naive": _naive(shape, e, mask_bytes=mask), "fused": _fused_by_program(shape, e)}


def wrong_mask_per_head(shape):
    """The mask counted (B, H, T, T), as if broadcast meant copied."""
    e = shape.element_bytes
    mask = shape.B * shape.H * shape.T * shape.T
    return {"naive": _naive(shape, e, mask_bytes=mask), "fused": _fused_by_program(shape, e)}


def wrong_scores_four_times(shape):
    """Scores written once, read three times (mask and softmax taken as in place)."""
    e = shape.element_bytes
    return {"naive": _naive(shape, e, score_moves=4), "fused": _fused_by_program(shape, e)}


def wrong_no_scale_op(shape):
    """q * scale forgotten: its read and write of q."""
    e = shape.element_bytes
    return {"naive": _naive(shape, e, qkv_moves=4), "fused": _fused_by_program(shape, e)}


def wrong_kv_once(shape):
    """K and V counted once for the whole grid, as if one program read them."""
    s, e = shape, shape.element_bytes
    return {"naive": _naive(s, e), "fused": 4 * s.B * s.H * s.T * s.D * e}


def wrong_full_tiles(shape):
    """Every tile counted full: masked-off rows past T counted as read."""
    e = shape.element_bytes
    fused = _fused_by_program(shape, e, rows_of=lambda start, block: block)
    return {"naive": _naive(shape, e), "fused": fused}


def wrong_every_key_tile(shape):
    """Each program reads all of K and V, as without the causal stop."""
    e, T, bn = shape.element_bytes, shape.T, shape.block_n
    fused = _fused_by_program(shape, e, kv_tiles=lambda start_m: range(0, T, bn))
    return {"naive": _naive(shape, e), "fused": fused}


def wrong_tiles_as_if_equal(shape):
    """Query tile i reads key tiles 0..i: right only when block_m == block_n."""
    e, bm, bn = shape.element_bytes, shape.block_m, shape.block_n
    fused = _fused_by_program(
        shape, e, kv_tiles=lambda start_m: [j * bn for j in range(start_m // bm + 1)]
    )
    return {"naive": _naive(shape, e), "fused": fused}


def wrong_no_output_write(shape):
    e = shape.element_bytes
    return {"naive": _naive(shape, e), "fused": _fused_by_program(shape, e, with_out=False)}


def wrong_always_four_bytes(shape):
    """float32's 4 bytes whatever the dtype."""
    return {"naive": _naive(shape, 4), "fused": _fused_by_program(shape, 4)}


def wrong_measures_naive(shape):
    """The naive count measured with lesson.moved_bytes instead of predicted."""
    s, e = shape, shape.element_bytes
    naive = lesson.moved_bytes(lesson.naive_attention, s.B, s.H, s.T, s.D, s.dtype).total
    return {"naive": naive, "fused": _fused_by_program(s, e)}


# Failing parts start with the count they judge ("naive: ..." / "fused: ...") and name their
# specimen ("T not a multiple of the tiles", "tiles of 32 queries x 64 keys", the dtype).
NAIVE = r"naive"
FUSED = r"fused"
TRAFFIC = [
    case(valid_tile_by_tile, "passed"),
    case(valid_closed_form, "passed"),
    case(wrong_no_mask_buffer, names=r"mask|bool", not_names=FUSED),
    case(wrong_mask_in_dtype, names=r"mask|bool", not_names=FUSED),
    case(wrong_mask_per_head, names=r"mask|bool", not_names=FUSED),
    case(wrong_scores_four_times, names=r"score|T ?x ?T|six|softmax", not_names=FUSED),
    case(wrong_no_scale_op, names=r"scale|mul|\bq\b", not_names=FUSED),
    case(
        wrong_kv_once,
        names=r"query tile|per (query )?tile|program|once|reread|re-read",
        not_names=NAIVE,
    ),
    case(wrong_full_tiles, names=r"mask|rows? past|partial|lane", not_names=NAIVE),
    case(wrong_every_key_tile, names=r"causal|loop|diagonal|key tiles?", not_names=NAIVE),
    case(wrong_tiles_as_if_equal, names=r"block_m|block_n|equal|same size", not_names=NAIVE),
    case(wrong_no_output_write, names=r"\bout\b|output|writ|store", not_names=NAIVE),
    case(wrong_always_four_bytes, names=r"dtype|element size|bytes per element|element_bytes"),
    case(wrong_measures_naive, names=r"predict|MovedBytes|moved_bytes|count"),
]
# The traffic check names the mistakes it lists ("Your number is exactly what this mistake
# gives: ..."); for the others it says only "Reread the code of the naive/fused version".
# closed after the round: the mask in the dtype, the scores moved 4 times, every tile counted
# full, key tiles 0..i, the output's write left out and 4 bytes per element are replayed
TRAFFIC = in_ci(TRAFFIC, {"valid-tile_by_tile", "wrong-kv_once"})


@pytest.mark.parametrize(("fn", "expect", "names", "not_names"), TRAFFIC)
def test_predict_traffic(fn, expect, names, not_names):
    predict_traffic = fn
    assert_graded(grade(lesson.check_predict_traffic, predict_traffic), expect, names, not_names)
