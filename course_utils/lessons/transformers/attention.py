"""Attention, by hand and fused: the same numbers, different memory, and which kernel runs.

`naive_attention` is the textbook formula (minGPT's): it builds the (B, H, T, T) score
matrix, masks it, softmaxes it and multiplies by V, so its memory grows with T squared.
`torch.nn.functional.scaled_dot_product_attention` (SDPA) computes the same function with a
kernel chosen for the inputs (flash, memory-efficient, cuDNN on GPUs; a flash-style kernel or
the plain math on CPUs) that never stores the whole score matrix
(https://docs.pytorch.org/docs/stable/generated/torch.nn.functional.scaled_dot_product_attention.html).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from ...device import amp_dtype


def allowed(doc_ids: torch.Tensor | None, T: int, device=None) -> torch.Tensor:
    """Which keys each query may see: (T, T) causal, or (B, 1, T, T) causal and within the
    same document when `doc_ids` (B, T) is given. True = attend."""
    causal = torch.ones(T, T, dtype=torch.bool, device=device).tril()
    if doc_ids is None:
        return causal
    same_doc = doc_ids[:, None, :, None] == doc_ids[:, None, None, :]
    return same_doc & causal


def naive_attention(q, k, v, doc_ids=None):
    """Causal self-attention written out: q, k, v (B, H, T, D) -> (B, H, T, D). With
    `doc_ids` (B, T), a token sees only earlier tokens of its own document."""
    T = q.shape[-2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])  # (B, H, T, T)
    scores = scores.masked_fill(~allowed(doc_ids, T, q.device), float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def score_bytes(B: int, H: int, T: int, dtype=torch.float32) -> int:
    """Bytes of one (B, H, T, T) score matrix: what the hand-written attention stores."""
    return B * H * T * T * torch.finfo(dtype).bits // 8


def qkv(B: int, H: int, T: int, D: int, *, seed: int = 0, device="cpu", dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(B, H, T, D, generator=g).to(device, dtype) for _ in range(3))


def random_docs(B: int, T: int, n_docs: int, *, seed: int = 0) -> torch.Tensor:
    """(B, T) document ids: each row cut at random places into up to `n_docs` documents."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(B):
        cuts = torch.randperm(T - 1, generator=g)[: n_docs - 1] + 1
        starts = torch.zeros(T, dtype=torch.long)
        starts[cuts] = 1
        rows.append(starts.cumsum(0))
    return torch.stack(rows)


class _OpNames(TorchDispatchMode):
    """The aten operators a call runs (below autograd), in order."""

    def __init__(self):
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(str(func.overloadpacket.__name__))
        return func(*args, **(kwargs or {}))


def kernels_run(fn: Callable[[], object]) -> list[str]:
    """The attention kernels (aten ops whose name says so) that `fn()` ran."""
    with _OpNames() as spy:
        fn()
    return [n for n in spy.names if "attention" in n or "flash" in n or "efficient" in n]


# torch 2.14's kernel filters (aten/src/ATen/native/transformers/cuda/sdp_utils.cpp):
# FlashAttention and cuDNN's take only fp16 and bf16 (check_dtypes_low_precision; bf16 from
# compute capability 8.0), and need sm80 or newer; the memory-efficient kernel also float32,
# from sm50. FlashAttention takes no attn_mask (check_for_attn_mask); cuDNN's and the
# memory-efficient one take a mask of a shape that broadcasts (check_attn_mask_shape). On a
# CPU, the flash-style kernel takes float32, bf16 and fp16, and a mask.
def probe_dtype(device) -> torch.dtype:
    """The dtype to ask SDPA's backends about on `device`: on a CUDA GPU its fast 16-bit type
    (bf16 from compute capability 8.0, fp16 before), the only types FlashAttention and cuDNN
    take, so a refusal there is the GPU's and not float32's; float32 elsewhere."""
    device = torch.device(device)
    return amp_dtype(device) if device.type == "cuda" else torch.float32


def backends(q, k, v, attn_mask=None) -> dict[str, str]:
    """Each SDPA backend alone (torch.nn.attention.sdpa_kernel): 'runs', or why it does not,
    on these inputs, causal (`is_causal=True`) or, given `attn_mask`, with that mask; and
    'default': the kernel SDPA picks when free to choose."""
    import warnings

    from torch.nn.attention import SDPBackend, sdpa_kernel

    def attend():
        if attn_mask is None:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)

    out = {}
    for backend in (
        SDPBackend.FLASH_ATTENTION,
        SDPBackend.EFFICIENT_ATTENTION,
        SDPBackend.CUDNN_ATTENTION,
        SDPBackend.MATH,
    ):
        try:  # a refused backend also warns why; the table says it
            with sdpa_kernel([backend]), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                attend()
            out[backend.name] = "runs"
        except RuntimeError as exc:
            out[backend.name] = f"not here ({str(exc).strip().splitlines()[0][:60]})"
    ran = kernels_run(attend)
    out["default"] = next((n for n in ran if n != "scaled_dot_product_attention"), "?")
    return out


def flex_support(device: torch.device) -> tuple[bool, str]:
    """(whether FlexAttention trains fused here, why not). flex_attention is fused only under
    torch.compile; on a GPU that needs Triton. Without compile it falls back to an unfused
    implementation that builds the whole score matrix (its own warning says so). On a CPU,
    torch 2.14's flex_attention refuses inputs that require grad, eager or compiled
    (torch/nn/attention/flex_attention.py, _validate_device: "FlexAttention does not support
    backward on CPU"), and TorchInductor's CPU template is inference-only
    (torch/_inductor/kernel/flex/flex_cpu.py: "torch.compile on CPU only supports
    inference"): it cannot train there."""
    try:
        from torch.nn.attention.flex_attention import create_block_mask  # noqa: F401
    except ImportError:
        return False, f"torch {torch.__version__} has no torch.nn.attention.flex_attention (2.5+)"
    if device.type == "cpu":
        return False, (
            f"on a CPU, torch {torch.__version__.split('+')[0]}'s FlexAttention runs forward "
            "only (no backward, eager or compiled; TorchInductor compiles it for inference), "
            "so it cannot train here: fused training needs a GPU. The explicit boolean mask "
            "is used instead"
        )
    if device.type != "cuda":
        return False, (
            f"on {device.type} FlexAttention is not measured by the course; the explicit "
            "boolean mask is used instead"
        )
    from .compiling import can_compile

    return can_compile(device)


def flex_attention_docs(q, k, v, doc_ids):
    """Causal attention within documents by FlexAttention: the mask as a function of (batch,
    head, query index, key index), turned into a block mask that lets the kernel skip every
    block of the T x T grid that is fully masked (https://pytorch.org/blog/flexattention/)."""
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    def mask_mod(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (doc_ids[b, q_idx] == doc_ids[b, kv_idx])

    B, _, T, _ = q.shape
    block_mask = create_block_mask(mask_mod, B, None, T, T, device=q.device)
    fn = torch.compile(flex_attention) if q.device.type == "cuda" else flex_attention
    return fn(q, k, v, block_mask=block_mask), block_mask
