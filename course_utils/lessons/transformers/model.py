"""A small decoder-only transformer over bytes (nanoGPT's shape, a few layers), and its loss.

Pre-norm blocks: x + attention(LayerNorm(x)), then x + MLP(LayerNorm(x)), as in GPT-2 and
nanoGPT (https://github.com/karpathy/nanoGPT/blob/master/model.py). The attention function
is a parameter, `attention(q, k, v, doc_ids) -> out` with q, k, v of shape (B, H, T, D), so
the notebook can swap the hand-written one, SDPA and the learner's. Positions come with the
batch, so a packed row can restart them at each document.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ...mode import pick
from .attention import allowed
from .text import IGNORE, VOCAB, Batch


@dataclass(frozen=True)
class Config:
    d_model: int = 128
    n_head: int = 4
    n_layer: int = 2
    max_len: int = 256  # longest row, in bytes
    dropout: float = 0.0


def config() -> Config:
    """The notebook's model: d_model 64, 2 layers in quick mode; 128, 4 layers in full; rows of
    up to 256 bytes in both."""
    return pick(
        quick=Config(d_model=64, n_head=4, n_layer=2, max_len=256),
        full=Config(d_model=128, n_head=4, n_layer=4, max_len=256),
    )


class SelfAttention(nn.Module):
    """Multi-head causal self-attention. `attention(q, k, v, doc_ids)`: the function that
    attends; None: the lesson's fused one, SDPA, written out in `forward` (not a function of
    q, k, v: that would be exercise 1's answer under another name, which the grading kernel
    must not hold)."""

    def __init__(self, cfg: Config, attention: Callable | None = None):
        super().__init__()
        self.n_head = cfg.n_head
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.attention = attention

    def forward(self, x: torch.Tensor, doc_ids: torch.Tensor | None = None) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.n_head, C // self.n_head).permute(2, 0, 3, 1, 4)
        if self.attention is not None:
            y = self.attention(q, k, v, doc_ids)  # (B, H, T, D)
        elif doc_ids is None:  # SDPA: is_causal, no mask
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # one boolean mask, causal and within each document, shared by the heads
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed(doc_ids, T, x.device))
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


class Block(nn.Module):
    def __init__(self, cfg: Config, attention: Callable | None = None):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(cfg.d_model), nn.LayerNorm(cfg.d_model)
        self.attn = SelfAttention(cfg, attention)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.d_model, 4 * cfg.d_model),
            nn.GELU(),
            nn.Linear(4 * cfg.d_model, cfg.d_model),
            nn.Dropout(cfg.dropout),
        )

    def forward(self, x: torch.Tensor, doc_ids: torch.Tensor | None = None) -> torch.Tensor:
        x = x + self.attn(self.ln1(x), doc_ids)
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    """Bytes in, next-byte logits out: (B, T) int64 -> (B, T, 256)."""

    def __init__(self, cfg: Config | None = None, attention: Callable | None = None):
        super().__init__()
        self.cfg = cfg = cfg or config()
        self.tok = nn.Embedding(VOCAB, cfg.d_model)
        self.pos = nn.Embedding(cfg.max_len, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg, attention) for _ in range(cfg.n_layer))
        self.ln = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, VOCAB, bias=False)
        self.head.weight = self.tok.weight  # tied, as in GPT-2
        self.apply(_init)

    def set_attention(self, attention: Callable | None) -> TinyGPT:
        for block in self.blocks:
            block.attn.attention = attention
        return self

    def forward(self, tokens, positions=None, doc_ids=None) -> torch.Tensor:
        if positions is None:
            positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.tok(tokens) + self.pos(positions)
        for block in self.blocks:
            x = block(x, doc_ids)
        return self.head(self.ln(x))


def _init(module: nn.Module) -> None:
    """GPT-2's initialisation (as nanoGPT): weights N(0, 0.02), biases 0, so the first loss
    is near ln(256), a uniform guess over bytes."""
    if isinstance(module, nn.Linear | nn.Embedding):
        nn.init.normal_(module.weight, 0.0, 0.02)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)


def build(seed: int = 0, cfg: Config | None = None, attention=None, device="cpu") -> TinyGPT:
    torch.manual_seed(seed)
    return TinyGPT(cfg, attention).to(device)


def loss_sum(model: nn.Module, batch: Batch) -> tuple[torch.Tensor, int]:
    """(sum of the cross-entropy over the batch's real targets, how many there are)."""
    logits = model(batch.tokens, batch.positions, batch.doc_ids)
    total = F.cross_entropy(
        logits.flatten(0, 1).float(), batch.targets.flatten(), ignore_index=IGNORE, reduction="sum"
    )
    return total, batch.real_targets


def loss(model: nn.Module, batch: Batch) -> torch.Tensor:
    """Mean cross-entropy per real target: what a training step minimises."""
    total, n = loss_sum(model, batch)
    return total / max(n, 1)
