"""Lesson 12's byte-level GPT, with the levers the speed-run turns: how attention is computed
(the hand-written formula or SDPA) and whether each block's activations are recomputed in the
backward pass (lesson 07's checkpointing). Pre-norm blocks, GELU MLP, tied embeddings and
GPT-2's initialisation, as nanoGPT (https://github.com/karpathy/nanoGPT/blob/master/model.py).
Written again here, not imported: lessons do not import each other."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from ...mode import pick
from .text import IGNORE, VOCAB, row_len


@dataclass(frozen=True)
class Config:
    d_model: int = 64
    n_head: int = 4
    n_layer: int = 2
    max_len: int = 128


def config() -> Config:
    """Quick mode: lesson 12's quick model (d_model 64, 2 layers); full: its full one."""
    return pick(
        quick=Config(64, 4, 2, row_len()),
        full=Config(128, 4, 4, row_len()),
    )


def naive_attention(q, k, v):
    """Causal attention written out (minGPT's): the (B, H, T, T) scores stored, masked,
    softmaxed, multiplied by V."""
    T = q.shape[-2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    causal = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    return torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1) @ v


class Block(nn.Module):
    def __init__(self, cfg: Config, attention: str):
        super().__init__()
        self.n_head, self.attention = cfg.n_head, attention
        self.ln1, self.ln2 = nn.LayerNorm(cfg.d_model), nn.LayerNorm(cfg.d_model)
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.mlp = nn.Sequential(
            nn.Linear(cfg.d_model, 4 * cfg.d_model),
            nn.GELU(),
            nn.Linear(4 * cfg.d_model, cfg.d_model),
        )

    def attend(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).view(B, T, 3, self.n_head, C // self.n_head).permute(2, 0, 3, 1, 4)
        if self.attention == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            y = naive_attention(q, k, v)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attend(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    """Bytes in, next-byte logits out: (B, T) int64 -> (B, T, 256). `attention`: "naive" or
    "sdpa"; `checkpointing`: each block recomputed in the backward (less memory, more time)."""

    def __init__(self, cfg: Config | None = None, attention="naive", checkpointing=False):
        super().__init__()
        self.cfg = cfg = cfg or config()
        self.checkpointing = checkpointing
        self.tok = nn.Embedding(VOCAB, cfg.d_model)
        self.pos = nn.Embedding(cfg.max_len, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg, attention) for _ in range(cfg.n_layer))
        self.ln = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, VOCAB, bias=False)
        self.head.weight = self.tok.weight  # tied, as in GPT-2
        self.apply(_init)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.tok(tokens) + self.pos(torch.arange(tokens.shape[1], device=tokens.device))
        for block in self.blocks:
            if self.checkpointing and torch.is_grad_enabled():
                x = checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        return self.head(self.ln(x))


def _init(module: nn.Module) -> None:
    """GPT-2's initialisation: weights N(0, 0.02), biases 0 (a first loss near ln 256)."""
    if isinstance(module, nn.Linear | nn.Embedding):
        nn.init.normal_(module.weight, 0.0, 0.02)
    if isinstance(module, nn.Linear) and module.bias is not None:
        nn.init.zeros_(module.bias)


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy per real target (IGNORE targets carry none), in float32."""
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), ignore_index=IGNORE)
