"""course_utils.memory: bytes saved for backward and peaks equal what can be worked out by
hand, on any device."""

from __future__ import annotations

import pytest
import torch
from torch.utils.checkpoint import checkpoint

import course_utils.memory as memory
from course_utils.memory import activation_bytes
from course_utils.models import MLP

# --- memory -----------------------------------------------------------------------------------


def mlp_saved_bytes(batch: int, dim: int, hidden: int, depth: int) -> int:
    """What autograd saves for an MLP forward, worked out by hand (float32, 4 bytes).

    Each Linear saves its input (for its weight's gradient) and its weight (a parameter: not
    counted); each ReLU saves its output, which is also the next Linear's input (one storage,
    counted once). So: the input x, and one batch x hidden output per ReLU.
    """
    return 4 * batch * (dim + depth * hidden)


def test_activation_bytes_of_an_mlp_equals_the_analytic_count():
    batch, dim, hidden, depth = 8, 16, 32, 3
    model = MLP(dim=dim, hidden=hidden, depth=depth, out=10)
    x = torch.randn(batch, dim)
    assert activation_bytes(lambda: model(x)) == mlp_saved_bytes(batch, dim, hidden, depth)


def test_activation_bytes_grows_with_depth_and_batch():
    model = MLP(dim=16, hidden=32, depth=5, out=10)
    small, big = torch.randn(4, 16), torch.randn(12, 16)
    assert activation_bytes(lambda: model(small)) == mlp_saved_bytes(4, 16, 32, 5)
    assert activation_bytes(lambda: model(big)) == 3 * activation_bytes(lambda: model(small))


def test_activation_bytes_leaves_out_excluded_tensors():
    batch, dim, hidden, depth = 8, 16, 32, 3
    model = MLP(dim=dim, hidden=hidden, depth=depth, out=10)
    x = torch.randn(batch, dim)
    without_x = activation_bytes(lambda: model(x), exclude=[x])
    assert without_x == mlp_saved_bytes(batch, dim, hidden, depth) - x.numel() * 4


def test_checkpointing_shrinks_activation_bytes():
    batch, dim, hidden, depth = 8, 16, 32, 6
    model = MLP(dim=dim, hidden=hidden, depth=depth, out=10)
    x = torch.randn(batch, dim)
    full = activation_bytes(lambda: model(x))

    def checkpointed():
        return model.head(checkpoint(model.blocks, x, use_reentrant=False))

    saved = activation_bytes(checkpointed)
    assert full == mlp_saved_bytes(batch, dim, hidden, depth)
    assert saved >= 4 * batch * hidden  # the head still saves its input
    assert saved <= full / 2  # the six blocks' activations are recomputed, not saved


def test_cuda_peak_memory_refuses_a_cpu_device():
    with pytest.raises(ValueError, match="CUDA"):
        memory.cuda_peak_memory(lambda: None, device="cpu")


def test_activation_bytes_under_autocast_counts_activations_not_weight_copies():
    """Autocast's bf16 copies of the weights are saved for backward but are not activations:
    the count equals that of the same model stored in bf16, half the fp32 count."""
    batch, dim, hidden, depth = 8, 16, 32, 3
    model = MLP(dim=dim, hidden=hidden, depth=depth, out=10)
    x = torch.randn(batch, dim)

    def autocast_forward():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return model(x)

    bf16_model = MLP(dim=dim, hidden=hidden, depth=depth, out=10).to(torch.bfloat16)
    under_autocast = activation_bytes(autocast_forward)
    assert under_autocast == activation_bytes(lambda: bf16_model(x.bfloat16()))
    assert under_autocast == mlp_saved_bytes(batch, dim, hidden, depth) // 2
