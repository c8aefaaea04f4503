"""What lesson 17's notebook shows: attention's memory against T (section 1), its bytes and
FLOPs per operator (section 1), online softmax traced block by block (section 4), the traffic
of both versions (section 5) and the kernels timed, on a GPU only (section 6)."""

from __future__ import annotations

import math
import time

import torch

from ...device import synchronize
from ...measure import compare
from .attention import attention_flops, attention_memory, moved_bytes, naive_attention, qkv, sdpa
from .runtime import interpreted, kernel_device
from .traffic import Shape

# NVIDIA H100 SXM: 989 TFLOP/s dense bf16, 3.35 TB/s HBM3 (https://www.nvidia.com/en-us/data-center/h100/)
H100 = {"flops": 989e12, "bytes_per_s": 3.35e12}
MiB = 2**20


def memory_table(lengths=(256, 512, 1024, 2048)) -> tuple[str, dict]:
    """A markdown table of the peak bytes each attention allocates (forward, B=1, H=4, D=16),
    measured here with cu.tensor_peak_bytes, and the table as data."""
    table = attention_memory(lengths)
    rows = ["| T | hand-written | SDPA | one T x T score matrix |", "|---|---|---|---|"]
    for T, (naive, fused, scores) in table.items():
        rows.append(
            f"| {T} | {naive / MiB:.2f} MiB | {fused / MiB:.2f} MiB | {scores / MiB:.2f} MiB |"
        )
    return "\n".join(rows), table


def operator_table(B=1, H=8, T=1024, D=64, dtype="bfloat16") -> str:
    """The naive attention's operators with the bytes each reads and writes (counted on the
    meta device), its FLOPs, and its arithmetic intensity beside an H100's ridge point."""
    counted = moved_bytes(naive_attention, B, H, T, D, dtype)
    rows = ["| operator | read | written |", "|---|---|---|"]
    rows += [f"| `{op}` | {r / MiB:.2f} MiB | {w / MiB:.2f} MiB |" for op, r, w in counted.ops]
    work = attention_flops(B, H, T, D)
    ridge = H100["flops"] / H100["bytes_per_s"]
    rows.append(
        f"\n{work / 1e9:.2f} GFLOP over {counted.total / MiB:.1f} MiB moved: "
        f"**{work / counted.total:.0f} FLOP per byte**. An H100 does {ridge:.0f} FLOP in the time "
        f"it moves one byte (989 TFLOP/s over 3.35 TB/s): below that, memory sets the pace."
    )
    return "\n".join(rows)


def online_softmax_trace(x: torch.Tensor, block: int) -> list[dict]:
    """Online softmax over `x` (1-D) in blocks: after each block, the running max m, the running
    sum l of exp(x - m), and the factor exp(m_old - m_new) the earlier sum was rescaled by."""
    m, total, steps = -math.inf, 0.0, []
    for start in range(0, len(x), block):
        chunk = x[start : start + block].double()
        m_new = max(m, float(chunk.max()))
        alpha = math.exp(m - m_new)  # 0 at the first block, 1 when the max stays
        total = total * alpha + float(torch.exp(chunk - m_new).sum())
        steps.append({"block": start // block, "max": m_new, "rescaled by": alpha, "sum": total})
        m = m_new
    return steps


def traffic_table(predict_traffic, lengths=(512, 2048, 8192)) -> str:
    """Bytes of each version by `predict_traffic` (the learner's once its check passed), the
    FLOPs of the causal half, and what an H100 would take for each at its bandwidth."""
    rows = [
        "| T | naive | fused | naive / fused | fused FLOP per byte | H100 time at 3.35 TB/s: naive, fused |",
        "|---|---|---|---|---|---|",
    ]  # fmt: skip
    for T in lengths:
        shape = Shape(1, 16, T, 64, "bfloat16", 128, 64)
        got = predict_traffic(shape)
        naive, fused = got["naive"], got["fused"]
        useful = 2 * shape.B * shape.H * T * T * shape.D  # the causal half of both matmuls
        seconds = [b / H100["bytes_per_s"] * 1e6 for b in (naive, fused)]
        rows.append(
            f"| {T} | {naive / MiB:,.0f} MiB | {fused / MiB:,.1f} MiB | {naive / fused:.0f}x | "
            f"{useful / fused:.0f} | {seconds[0]:,.0f} µs, {seconds[1]:,.0f} µs |"
        )
    return "\n".join(rows)


def interpreter_cost(attention, T: int = 128, D: int = 16) -> str:
    """One call of `attention` against SDPA at a small shape, where the kernels run now."""
    device = kernel_device()
    q, k, v = (t.to(device) for t in qkv(1, 2, T, D))
    attention(q, k, v)  # the first call also builds the kernel's specialisation
    synchronize(device)
    start = time.perf_counter()
    attention(q, k, v)
    synchronize(device)
    mine = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(100):
        sdpa(q, k, v)
    synchronize(device)
    fused = (time.perf_counter() - start) / 100
    where = "Triton's interpreter" if interpreted() else "the GPU"
    return (
        f"your kernel on {where}: {mine * 1e3:.1f} ms per call; SDPA: {fused * 1e6:.0f} µs "
        f"({mine / fused:,.0f}x) on q, k, v of 1x2x{T}x{D}"
    )


def time_on_gpu(attention, T: int = 4096, D: int = 64, heads: int = 16):
    """SDPA and `attention` (float32, causal: the exercise's contract) each timed in
    interleaved pairs against the hand-written version, on a CUDA GPU; None elsewhere. Not
    yet run on a GPU."""
    if interpreted() or not torch.cuda.is_available():
        return None
    q, k, v = qkv(1, heads, T, D, device="cuda")
    return {
        name: compare(
            lambda: naive_attention(q, k, v),
            lambda f=fn: f(q, k, v),
            labels=("hand-written", name),
            repeats=10,
        )  # fmt: skip
        for name, fn in (("SDPA", sdpa), ("yours", attention))
    }
