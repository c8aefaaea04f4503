"""The GPT this lesson measures: lesson 12's byte-level decoder (pre-norm blocks, causal SDPA,
a GELU MLP four times as wide, tied embedding and head) at the sizes a CPU measures in seconds.

A lesson may not import another lesson (tests/test_lessons.py), so the block is restated here in
lesson 12's shape (course_utils/lessons/transformers/model.py), without its swappable attention
and packing, which this lesson does not use. The text is the same: CPython's help topics.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

VOCAB = 256  # bytes


@dataclass(frozen=True)
class Size:
    """A model and batch: width, heads, blocks; rows and length of the batch."""

    d_model: int = 64
    n_head: int = 4
    n_layer: int = 2
    rows: int = 4
    T: int = 128


DEFAULT = Size()  # the notebook's GPT and batch: 2 blocks of width 64, 4 rows of 128 bytes


class Block(nn.Module):
    """x + attention(LayerNorm(x)), then x + MLP(LayerNorm(x)), as in GPT-2 and lesson 12."""

    def __init__(self, d_model: int, n_head: int):
        super().__init__()
        self.n_head = n_head
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.up, self.down = nn.Linear(d_model, 4 * d_model), nn.Linear(4 * d_model, d_model)

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.n_head, C // self.n_head).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.ln1(x))
        return x + self.down(F.gelu(self.up(self.ln2(x))))


class GPT(nn.Module):
    """Bytes in, next-byte logits out. `wrap(block, x)` runs each block: plain, or under a
    checkpoint (levers.py), so every lever acts on the same model."""

    def __init__(self, size: Size):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, size.d_model)
        self.pos = nn.Embedding(size.T, size.d_model)
        self.blocks = nn.ModuleList(Block(size.d_model, size.n_head) for _ in range(size.n_layer))
        self.ln = nn.LayerNorm(size.d_model)
        self.head = nn.Linear(size.d_model, VOCAB, bias=False)
        self.head.weight = self.tok.weight  # tied, as in GPT-2

    def forward(self, tokens: torch.Tensor, wrap=None) -> torch.Tensor:
        x = self.tok(tokens) + self.pos(torch.arange(tokens.shape[1]))
        for block in self.blocks:
            x = block(x) if wrap is None else wrap(block, x)
        return self.head(self.ln(x))


@functools.cache
def _text() -> torch.Tensor:
    from pydoc_data.topics import topics  # lesson 12's corpus: every Python has it

    data = "\n\n".join(topics[k] for k in sorted(topics)).encode()
    return torch.frombuffer(bytearray(data), dtype=torch.uint8).long()


def batch(size: Size, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(tokens, targets) of `size.rows` rows of `size.T` bytes from the text, at offsets drawn
    with `seed`: targets are the tokens shifted by one."""
    text = _text()
    g = torch.Generator().manual_seed(seed)
    starts = torch.randint(0, len(text) - size.T - 1, (size.rows,), generator=g)
    rows = torch.stack([text[s : s + size.T + 1] for s in starts.tolist()])
    return rows[:, :-1], rows[:, 1:]


def build(size: Size, seed: int = 0) -> GPT:
    """The model with GPT-2's initialisation (weights N(0, 0.02), biases 0), from `seed`."""
    torch.manual_seed(seed)
    model = GPT(size)
    for module in model.modules():
        if isinstance(module, nn.Linear | nn.Embedding):
            nn.init.normal_(module.weight, 0.0, 0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)
    return model


def loss_of(model: GPT, tokens: torch.Tensor, targets: torch.Tensor, wrap=None) -> torch.Tensor:
    logits = model(tokens, wrap)
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())
