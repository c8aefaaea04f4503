"""Padding against packing, measured: what a list of batches holds, the loss it gives, and how
fast it trains per *real* token.

A batch's real tokens are its targets that carry loss; everything else in its `rows x T`
slots (padding, a document's last token) is computed and thrown away. Packing several
documents into one row wastes almost nothing, but only gives the same loss if each document
sees nothing but itself: attention kept inside it (a block-diagonal causal mask) and its
positions restarting at 0 (https://arxiv.org/abs/2107.02027, Krell et al., "Efficient
sequence packing without cross-contamination").
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

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


@dataclass
class Layout:
    """What a learner's batches hold, read from their tensors alone. `problems` by kind:
    "targets" (what a token predicts), "positions", "doc_ids" (what a token attends to).
    A document is read as the tokens of a piece of a row plus the piece's last target, so
    both layouts that train each document alone read the same: a document's bytes all in
    `tokens` (its last token's target IGNORE), or nanoGPT's pairs (tokens d[:-1], targets
    d[1:])."""

    documents: Counter = field(default_factory=Counter)  # byte tuples of each document found
    crossings: list = field(default_factory=list)  # (where, document): see `coverage`
    problems: dict[str, list[str]] = field(default_factory=dict)
    shapes: set = field(default_factory=set)
    max_rows: int = 0
    max_len: int = 0

    def add(self, kind: str, message: str) -> None:
        self.problems.setdefault(kind, []).append(message)


def _field(batch, name: str):
    value = getattr(batch, name, None)
    return value if value is None else torch.as_tensor(value)


def _row(t: torch.Tensor | None, r: int) -> list[int] | None:
    return None if t is None else t[r].cpu().tolist()


def read_layout(batches) -> Layout:
    """Recover the documents from the targets (a piece of a row whose every target is the
    next token, the last one excepted), and note every way the batches break the contract of
    `text.Batch`."""
    out = Layout()
    for b, batch in enumerate(batches):
        tokens, targets = _field(batch, "tokens"), _field(batch, "targets")
        positions, doc_ids = _field(batch, "positions"), _field(batch, "doc_ids")
        if tokens is None or targets is None or tokens.dim() != 2 or tokens.shape != targets.shape:
            out.add("targets", f"batch {b} has no (rows, T) tokens and targets of one shape")
            continue
        out.shapes.add(tuple(tokens.shape))
        out.max_rows = max(out.max_rows, tokens.shape[0])
        out.max_len = max(out.max_len, tokens.shape[1])
        for r in range(tokens.shape[0]):
            where, tok, tgt = f"batch {b}, row {r}", _row(tokens, r), _row(targets, r)
            ids, pos = _row(doc_ids, r), _row(positions, r)
            for s, e, crosses in _pieces(out, where, tok, tgt, ids, pos):
                doc = (*tok[s : e + 1], tgt[e])
                out.documents[doc] += 1
                if crosses:
                    out.crossings.append((where, doc))
                _positions(out, where, pos, s, e)
                _attention(out, where, ids, s)
    return out


def _pieces(out: Layout, where: str, tok, tgt, ids, pos) -> list[tuple[int, int, bool]]:
    """(first, last column, crosses) of each piece with targets in a row. A piece ends before
    a column without target, where doc_ids change, or where the chain of targets breaks and
    positions restart at 0 (each says a new document starts). `crosses`: it ended where
    doc_ids change and its last target is the next column's token (the next document's
    first, or by chance the last byte of nanoGPT's pairs: `coverage` tells them apart)."""
    pieces, s, broken = [], None, False

    def close(e: int, crosses: bool) -> None:
        if broken:
            out.add(
                "targets",
                f"{where}: a target is not the token that follows it in the row (columns "
                f"{s}-{e}, and positions do not restart at 0 where it breaks)",
            )
        else:
            pieces.append((s, e, crosses))

    for t, target in enumerate(tgt):
        if target == IGNORE:
            if s is not None:
                close(t - 1, False)
            s = None
            continue
        if s is None:
            s, broken = t, False
            continue
        chained = tgt[t - 1] == tok[t]
        new_doc = ids is not None and ids[t] != ids[t - 1]
        if new_doc or (not chained and pos is not None and pos[t] == 0):
            close(t - 1, new_doc and chained)
            s, broken = t, False
        elif not chained:
            broken = True
    if s is not None:
        close(len(tgt) - 1, False)
    return pieces


def _positions(out: Layout, where: str, pos, s: int, e: int) -> None:
    """The positions of the tokens that predict (a document's last byte predicts nothing)."""
    if pos is None:
        if s != 0:
            out.add(
                "positions",
                f"{where}: a document starts at column {s} but positions is None (the model "
                "then numbers it from the row's start, not from 0)",
            )
    elif pos[s : e + 1] != list(range(e + 1 - s)):
        out.add(
            "positions",
            f"{where}: the positions of a document starting at column {s} do not count 0, 1, "
            "2, ... from its first token",
        )


def _attention(out: Layout, where: str, ids, s: int) -> None:
    if s == 0:
        return
    if ids is None:
        out.add(
            "doc_ids",
            f"{where}: a document starts at column {s} with doc_ids None: it attends to the "
            "tokens before it in the row (another document, or padding)",
        )
    elif ids[s] in ids[:s]:
        out.add(
            "doc_ids",
            f"{where}: a document starting at column {s} shares its doc_id with tokens before "
            "it in the row, so it attends to them",
        )


def coverage(layout: Layout, docs: list[torch.Tensor]) -> list[str]:
    """What is missing, repeated or changed, against the documents given. A piece that
    `crosses` is a whole document whose last token predicts the next document's first when
    it is not itself a document but is one without its last target."""
    want = Counter(tuple(d.tolist()) for d in docs)
    found, out = Counter(layout.documents), []
    for where, doc in layout.crossings:
        if not want[doc] and want[doc[:-1]]:
            found[doc] -= 1
            found[doc[:-1]] += 1
            out.append(
                f"{where}: a target crosses from one document into the next (a document's "
                "last token must have no target)"
            )
    missing, extra = want - found, +found - want
    if missing:
        out.append(f"{sum(missing.values())} of {len(docs)} documents never reach the model whole")
    if extra:
        out.append(
            f"{sum(extra.values())} documents appear that are not in the input (split, cut, repeated or merged)"
        )
    return out


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


def _as_batch(batch) -> Batch:
    fields = ("tokens", "targets", "positions", "doc_ids")
    return Batch(*(_field(batch, f) for f in fields))


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
