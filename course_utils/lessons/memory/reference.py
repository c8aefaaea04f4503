"""Reference answers of lesson 15 (each verified by its check in tests/test_lesson_15.py, on
the CPU, torch 2.14, cpu-bf16 class)."""

from __future__ import annotations

import torch
from torch.utils.checkpoint import CheckpointPolicy

from ...checks import reference


@reference
def reference_policy(ctx, op, *args, **kwargs):
    """Keep what is costly to recompute, recompute the cheap pointwise ops and norms."""
    # the operators that hold a block's FLOPs: matmuls (a Linear on 3-D input runs addmm or mm)
    # and attention, in each of SDPA's kernels (CPU flash, CUDA flash, memory-efficient, cuDNN)
    costly = {
        torch.ops.aten.mm.default,
        torch.ops.aten.addmm.default,
        torch.ops.aten.bmm.default,
        torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default,
        torch.ops.aten._scaled_dot_product_flash_attention.default,
        torch.ops.aten._scaled_dot_product_efficient_attention.default,
        torch.ops.aten._scaled_dot_product_cudnn_attention.default,
    }
    return CheckpointPolicy.MUST_SAVE if op in costly else CheckpointPolicy.PREFER_RECOMPUTE


@reference
def reference_to_float8(x):
    """Rowwise e4m3: each row's largest magnitude maps to 448; a zero row keeps a scale > 0."""
    fp8 = torch.float8_e4m3fn
    amax = x.float().abs().amax(dim=1, keepdim=True)
    scale = (amax / torch.finfo(fp8).max).clamp(min=torch.finfo(torch.float32).tiny)
    return (x.float() / scale).to(fp8), scale


@reference
def reference_plan_for(budget_bytes: int, pcie_bytes: int) -> dict:
    """Measure every plan, keep those that fit, take the cheapest: fewest recomputed FLOPs,
    then fewest micro-batches, then no offload."""
    from .plans import cost, every_plan, measure_plan

    fitting = []
    for plan in every_plan():
        got = measure_plan(plan)
        if got["held"] <= budget_bytes and got["offloaded"] <= pcie_bytes:
            fitting.append((cost(plan, got), plan))
    return min(fitting, key=lambda pair: pair[0])[1]
