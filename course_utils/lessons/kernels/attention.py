"""Attention written naively and fused, and the instruments of section 1: the bytes each
operator reads and writes (a dispatch mode), the FLOPs (FlopCounterMode), and the peak bytes of
the tensors each version allocates (cu.tensor_peak_bytes)."""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from ...measure import flops
from ...memory import tensor_peak_bytes
from .traffic import COUNTING

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@functools.lru_cache(maxsize=8)
def causal_mask(T: int, device="cpu") -> torch.Tensor:
    """(T, T) bool, True above the diagonal: the keys a query may not see. Built once per
    length and kept, as a model keeps it in a buffer."""
    return torch.ones(T, T, dtype=torch.bool, device=device).triu(1)


def naive_attention(q, k, v):
    """Causal attention written out, q, k, v (B, H, T, D) -> (B, H, T, D): each line is one
    kernel that reads its inputs from memory and writes its output back."""
    scale = q.shape[-1] ** -0.5
    scores = (q * scale) @ k.transpose(-2, -1)  # (B, H, T, T) written
    scores = scores.masked_fill(causal_mask(q.shape[-2], str(q.device)), float("-inf"))
    probs = torch.softmax(scores, dim=-1)  # read, and written again
    return probs @ v  # read a third time


def sdpa(q, k, v):
    """PyTorch's fused attention (a flash-style kernel on CUDA and on the CPU)."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def qkv(B: int, H: int, T: int, D: int, *, dtype=torch.float32, device="cpu", seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(B, H, T, D, generator=g).to(device, dtype) for _ in range(3))


def _nbytes(tree) -> int:
    return sum(
        t.numel() * t.element_size() for t in tree_leaves(tree) if isinstance(t, torch.Tensor)
    )


class MovedBytes(TorchDispatchMode):
    """Counts, for every operator that computes (views move nothing), the bytes of the tensors
    it reads and of those it writes: what an unfused program moves through memory, caches
    aside."""

    ALIASES = {torch.ops.aten._unsafe_view.default, torch.ops.aten.alias.default}

    def __init__(self):
        if COUNTING:  # exercise 3's check is asking the learner's predict_traffic
            raise RuntimeError(
                "predict_traffic asks for a prediction: count the bytes from the kernels' code, "
                "not with lesson.MovedBytes or lesson.moved_bytes"
            )
        super().__init__()
        self.ops: list[tuple[str, int, int]] = []  # (operator, bytes read, bytes written)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if not (func.is_view or func in self.ALIASES):
            self.ops.append((func.__name__, _nbytes((args, kwargs)), _nbytes(out)))
        return out

    @property
    def total(self) -> int:
        return sum(read + written for _, read, written in self.ops)


def moved_bytes(attention, B: int, H: int, T: int, D: int, dtype="float32") -> MovedBytes:
    """The operators `attention` runs on (B, H, T, D) inputs, counted on the meta device (no
    memory needed, so T can be large). It refuses while exercise 3's check asks for a
    prediction (traffic.COUNTING), as MovedBytes does."""
    q, k, v = (torch.empty(B, H, T, D, dtype=DTYPES[dtype], device="meta") for _ in range(3))
    causal_mask(T, "meta")  # the model's buffer, built before the step
    with MovedBytes() as counter:
        attention(q, k, v)
    return counter


def attention_flops(B: int, H: int, T: int, D: int) -> int:
    """FLOPs of the two matmuls (FlopCounterMode counts the full T x T, as the naive code runs)."""
    q, k, v = (torch.empty(B, H, T, D, device="meta") for _ in range(3))
    return flops(lambda: naive_attention(q, k, v))


def attention_memory(lengths, B: int = 1, H: int = 4, D: int = 16) -> dict:
    """{T: (hand-written peak bytes, SDPA's peak bytes, one score matrix's bytes)}, forward."""
    table = {}
    for T in lengths:
        inputs = qkv(B, H, T, D)
        table[T] = (
            tensor_peak_bytes(lambda x=inputs: naive_attention(*x)),
            tensor_peak_bytes(lambda x=inputs: sdpa(*x)),
            B * H * T * T * 4,
        )
    return table
