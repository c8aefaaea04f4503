"""Reference answers of lesson 17 (each verified by its check in tests/test_lesson_17.py, on
the CPU through Triton 3.8's interpreter, torch 2.14, cpu-bf16 class)."""

from __future__ import annotations

import math

from ...checks import reference
from .runtime import prepare


@reference
def reference_softmax(x):
    """Row softmax by the kernel of reference_kernels.py: masked lanes loaded as -inf."""
    prepare()
    from .reference_kernels import softmax

    return softmax(x)


@reference
def reference_attention(q, k, v):
    """Causal attention by the flash forward of reference_kernels.py (tiles of 32 x 32)."""
    prepare()
    from .reference_kernels import flash_attention

    return flash_attention(q, k, v)


@reference
def reference_predict_traffic(shape) -> dict:
    """Bytes each version moves: the naive one writes and rereads the T x T scores (and the
    mask once); the fused one reads K and V once per query tile, up to the diagonal."""
    e, heads = shape.element_bytes, shape.B * shape.H
    naive = 6 * heads * shape.T**2 * e + 6 * heads * shape.T * shape.D * e + shape.T**2
    rows = 0
    for i in range(math.ceil(shape.T / shape.block_m)):
        last = (i + 1) * shape.block_m  # the loop's end: key tiles up to the tile's last query
        rows += min(shape.T, math.ceil(last / shape.block_n) * shape.block_n)
    fused = heads * shape.D * e * (2 * shape.T + 2 * rows)
    return {"naive": naive, "fused": fused}
