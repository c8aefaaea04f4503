"""Lesson 12's reference answers. Verified by tests/test_lesson_12.py on a cpu-bf16 machine
(torch 2.14, 2 shared cores): each passes its check, and the demos use them before the
learner has written their own."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ...checks import reference
from .compiling import ColleagueBlock
from .text import IGNORE, Batch


@reference
def reference_attention(q, k, v, doc_ids=None):
    """Causal self-attention by SDPA. Without documents, `is_causal=True` (the kernel skips
    the masked half). With them, one boolean mask, causal and within the document, of shape
    (B, 1, T, T): shared by the heads, it costs a byte per pair instead of a float per head.
    SDPA refuses `is_causal` together with `attn_mask`, so the causal part goes in the mask."""
    if doc_ids is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    T = q.shape[-2]
    causal = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    same_doc = doc_ids[:, None, :, None] == doc_ids[:, None, None, :]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=same_doc & causal)


def _first_fit_decreasing(docs: list[torch.Tensor], row_len: int) -> list[list[torch.Tensor]]:
    rows: list[list[torch.Tensor]] = []
    free: list[int] = []
    for doc in sorted(docs, key=len, reverse=True):
        for r, room in enumerate(free):
            if len(doc) <= room:
                rows[r].append(doc)
                free[r] -= len(doc)
                break
        else:
            rows.append([doc])
            free.append(row_len - len(doc))
    return rows


@reference
def reference_make_batches(docs: list[torch.Tensor], rows: int, row_len: int) -> list[Batch]:
    """Pack: documents into rows of `row_len` by first-fit decreasing (a whole document per
    row slot, never split, so each keeps its whole context), `rows` rows per batch. Positions
    restart at each document; doc_ids keep attention inside it; a document's last token and
    the padding at a row's end carry no target (IGNORE). Every batch has one shape."""
    packed = _first_fit_decreasing(docs, row_len)
    batches = []
    for start in range(0, len(packed), rows):
        chunk = packed[start : start + rows]
        shape = (len(chunk), row_len)
        tokens = torch.zeros(shape, dtype=torch.long)
        targets = torch.full(shape, IGNORE, dtype=torch.long)
        positions = torch.zeros(shape, dtype=torch.long)
        doc_ids = torch.full(shape, -1, dtype=torch.long)  # padding: a document of its own
        for r, row in enumerate(chunk):
            col = 0
            for i, doc in enumerate(row):
                n = len(doc)
                tokens[r, col : col + n] = doc
                targets[r, col : col + n - 1] = doc[1:]
                positions[r, col : col + n] = torch.arange(n)
                doc_ids[r, col : col + n] = i
                col += n
        batches.append(Batch(tokens, targets, positions, doc_ids))
    return batches


class ReferenceBlock(ColleagueBlock):
    """The colleague's block without its graph break: the dashboard statistic stays a
    tensor on the device (detached, so it does not keep the step's autograd graph alive),
    read as a number only when the dashboard wants it. One graph, no sync per step."""

    @reference
    def forward(self, x, doc_ids=None):
        assert x.dim() == 3, "expects (batch, time, channels)"
        h = self.attn(self.ln1(x), doc_ids)
        x = x + h
        self.last_rms = h.detach().pow(2).mean().sqrt()
        return x + self.mlp(self.ln2(x))
