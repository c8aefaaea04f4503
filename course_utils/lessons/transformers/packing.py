"""Padding against packing, measured: the check's documents, the loss a list of batches gives,
and how fast it trains per *real* token (what the batches hold is read in layout.py).

A batch's real tokens are its targets that carry loss; everything else in its `rows x T`
slots (padding, a document's last token) is computed and thrown away. Packing several
documents into one row wastes almost nothing, but only gives the same loss if each document
sees nothing but itself: attention kept inside it (a block-diagonal causal mask) and its
positions restarting at 0 (https://arxiv.org/abs/2107.02027, Krell et al., "Efficient
sequence packing without cross-contamination").
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from .attention import naive_attention
from .model import Config, TinyGPT, loss_sum
from .text import IGNORE, Batch, documents

# The check's scenario (fixed in both modes): the lesson's documents cut at ROW_LEN bytes,
# mostly short ones with a few long ones (as in chat or instruction data): N_SHORT of at most
# SHORT bytes and N_LONG of at least LONG, shuffled; ROWS rows per batch.
ROW_LEN, ROWS, N_SHORT, SHORT, N_LONG, LONG = 256, 8, 40, 96, 8, 200
N_DOCS = N_SHORT + N_LONG
# A second call with sizes the exercise does not name, so `rows` and `row_len` must come from
# the arguments: the N_SHORT short documents, OTHER_ROWS rows of OTHER_ROW_LEN per batch.
OTHER_ROWS, OTHER_ROW_LEN = 3, 128
TIMING_CONFIG = Config(d_model=32, n_head=2, n_layer=1, max_len=ROW_LEN)


def check_docs() -> list[torch.Tensor]:
    """The check's 48 documents: 40 short (2-96 bytes) and 8 long (200-256), shuffled."""
    docs = documents(ROW_LEN, seed=12)
    short = [d for d in docs if len(d) <= SHORT][:N_SHORT]
    long = [d for d in docs if len(d) >= LONG][:N_LONG]
    mixed = short + long
    order = torch.randperm(len(mixed), generator=torch.Generator().manual_seed(12)).tolist()
    return [mixed[i] for i in order]


def other_docs(row_len: int = OTHER_ROW_LEN) -> list[torch.Tensor]:
    """The check's documents that fit `row_len` (SHORT to LONG - 1: its 40 short ones), in
    the same order."""
    return [d for d in check_docs() if len(d) <= row_len]


def probe_model(seed: int = 0, attention=naive_attention) -> TinyGPT:
    """A model whose loss depends strongly on what each token sees: weights drawn large, so
    a token that attends across documents, or sits at another position, changes the loss
    visibly (at initialisation a model predicts nearly uniform bytes whatever it sees)."""
    torch.manual_seed(seed)
    model = TinyGPT(Config(d_model=32, n_head=2, n_layer=2, max_len=ROW_LEN), attention)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0, 0.5)
    return model.eval()


def loss_of(model: nn.Module, batches) -> tuple[float, int]:
    """(sum of the cross-entropy over every real target of the batches, their number)."""
    total, n = 0.0, 0
    with torch.no_grad():
        for batch in batches:
            s, k = loss_sum(model, _as_batch(batch))
            total, n = total + float(s), n + k
    return total, n


def alone_loss(model: nn.Module, docs: list[torch.Tensor]) -> tuple[float, int]:
    """The same sum with each document alone in a row of its own length: the ground truth."""
    return loss_of(model, [Batch(d[None, :], _targets(d)[None, :]) for d in docs])


def _targets(doc: torch.Tensor) -> torch.Tensor:
    t = torch.full_like(doc, IGNORE)
    t[:-1] = doc[1:]
    return t


def field_of(batch, name: str) -> torch.Tensor | None:
    """A field of a learner's batch as a tensor (or None)."""
    value = getattr(batch, name, None)
    return value if value is None else torch.as_tensor(value)


def _as_batch(batch) -> Batch:
    fields = ("tokens", "targets", "positions", "doc_ids")
    return Batch(*(field_of(batch, f) for f in fields))


def epoch(model: nn.Module, batches) -> Callable[[], None]:
    """One pass of forward + backward over every batch, on the model's device (the optimizer
    step, the same per step whatever the batches hold, is left out)."""
    device = next(model.parameters()).device
    batches = [_as_batch(b).to(device) for b in batches]

    def run() -> None:
        for batch in batches:
            total, n = loss_sum(model, batch)
            (total / max(n, 1)).backward()
        model.zero_grad(set_to_none=True)

    return run
