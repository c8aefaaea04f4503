"""Lesson 17's reference kernels (the answers of exercises 1 and 2; `course release` leaves
this file out). Imported only through reference.py, after runtime.prepare() has chosen where
kernels run: Triton reads TRITON_INTERPRET when `@triton.jit` decorates."""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def softmax_rows(X, Y, n_cols, x_stride, y_stride, BLOCK: tl.constexpr):
    """One program per row; lanes past the row's end are -inf, so they add exp(-inf) = 0."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    inside = cols < n_cols
    x = tl.load(X + row * x_stride + cols, mask=inside, other=-float("inf"))
    num = tl.exp(x - tl.max(x, axis=0))
    tl.store(Y + row * y_stride + cols, num / tl.sum(num, axis=0), mask=inside)


def softmax(x: torch.Tensor) -> torch.Tensor:
    rows, n_cols = x.shape
    y = torch.empty_like(x)
    block = triton.next_power_of_2(n_cols)
    softmax_rows[(rows,)](x, y, n_cols, x.stride(0), y.stride(0), BLOCK=block)
    return y


@triton.jit
def flash_forward(Q, K, V, Out, T, scale, D: tl.constexpr, BLOCK_M: tl.constexpr,
                  BLOCK_N: tl.constexpr):  # fmt: skip
    """One program per tile of BLOCK_M queries of one (batch, head); q, k, v contiguous."""
    start_m = tl.program_id(0) * BLOCK_M
    base = tl.program_id(1) * T * D
    rows = start_m + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, D)
    q = tl.load(Q + base + rows[:, None] * D + dims[None, :], mask=rows[:, None] < T, other=0.0)
    m_i = tl.full([BLOCK_M], -float("inf"), tl.float32)  # running max of each query's scores
    l_i = tl.zeros([BLOCK_M], tl.float32)  # running sum of exp(score - m_i)
    acc = tl.zeros([BLOCK_M, D], tl.float32)  # running sum of exp(score - m_i) * v
    for start_n in range(0, start_m + BLOCK_M, BLOCK_N):  # causal: no tile past the diagonal
        cols = start_n + tl.arange(0, BLOCK_N)
        kv = base + cols[:, None] * D + dims[None, :]
        k = tl.load(K + kv, mask=cols[:, None] < T, other=0.0)
        v = tl.load(V + kv, mask=cols[:, None] < T, other=0.0)
        s = tl.dot(q, tl.trans(k)) * scale
        s = tl.where(rows[:, None] >= cols[None, :], s, -float("inf"))
        m_new = tl.maximum(m_i, tl.max(s, axis=1))
        alpha = tl.exp(m_i - m_new)  # < 1 where the max grew: the old terms shrink to match
        p = tl.exp(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p, v)
        m_i = m_new
    tl.store(Out + base + rows[:, None] * D + dims[None, :], acc / l_i[:, None],
             mask=rows[:, None] < T)  # fmt: skip


def flash_attention(q, k, v, block_m: int = 32, block_n: int = 32):
    B, H, T, D = q.shape
    q, k, v = (t.contiguous() for t in (q, k, v))
    out = torch.empty_like(q)
    grid = (triton.cdiv(T, block_m), B * H)
    flash_forward[grid](q, k, v, out, T, D**-0.5, D=D, BLOCK_M=block_m, BLOCK_N=block_n)
    return out
