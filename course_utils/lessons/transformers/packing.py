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
TIMING_CONFIG = Config(d_model=32, n_head=2, n_layer=1, max_len=ROW_LEN)


def check_docs() -> list[torch.Tensor]:
    """The check's 48 documents: 40 short (2-96 bytes) and 8 long (200-256), shuffled."""
    docs = documents(ROW_LEN, seed=12)
    short = [d for d in docs if len(d) <= SHORT][:N_SHORT]
    long = [d for d in docs if len(d) >= LONG][:N_LONG]
    mixed = short + long
    order = torch.randperm(len(mixed), generator=torch.Generator().manual_seed(12)).tolist()
    return [mixed[i] for i in order]


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
    "targets" (what a token predicts), "positions", "doc_ids" (what a token attends to)."""

    documents: Counter = field(default_factory=Counter)  # bytes of each document found
    problems: dict[str, list[str]] = field(default_factory=dict)
    shapes: set = field(default_factory=set)
    max_rows: int = 0
    max_len: int = 0

    def add(self, kind: str, message: str) -> None:
        self.problems.setdefault(kind, []).append(message)


def _field(batch, name: str):
    value = getattr(batch, name, None)
    return value if value is None else torch.as_tensor(value)


def read_layout(batches) -> Layout:
    """Recover the documents from the targets (a document is a run of tokens each of whose
    targets is the next token, ending at a token with no target), and note every way the
    batches break the contract of `text.Batch`."""
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
            for s, e in _runs(out, f"batch {b}, row {r}", tokens[r], targets[r]):
                ids = None if doc_ids is None else doc_ids[r].cpu()
                if ids is not None and (ids[s : e + 1] != ids[s]).any():
                    out.add(
                        "targets",
                        f"batch {b}, row {r}: a target crosses from one document into the "
                        "next (a document's last token must have no target)",
                    )
                    continue
                out.documents[bytes(tokens[r, s : e + 1].tolist())] += 1
                _positions(out, f"batch {b}, row {r}", positions, r, s, e)
                _attention(out, f"batch {b}, row {r}", ids, s)
    return out


def _runs(out: Layout, where: str, tok, tgt) -> list[tuple[int, int]]:
    """(first, last) column of each document in a row: chained targets, then one without."""
    T, real = len(tok), (tgt != IGNORE).tolist()
    runs = []
    for s in (t for t in range(T) if real[t] and (t == 0 or not real[t - 1])):
        e = s
        while e < T and real[e]:
            e += 1
        if e >= T:
            out.add("targets", f"{where}: the last column has a target, but no token follows it")
        elif not torch.equal(tgt[s:e], tok[s + 1 : e + 1]):
            out.add("targets", f"{where}: a target is not the token that follows it in the row")
        else:
            runs.append((s, e))
    return runs


def _positions(out: Layout, where: str, positions, r: int, s: int, e: int) -> None:
    if positions is None:
        if s != 0:
            out.add(
                "positions",
                f"{where}: a document starts at column {s} but positions is None (the model "
                "then numbers it from the row's start, not from 0)",
            )
    elif not torch.equal(positions[r, s : e + 1].cpu(), torch.arange(e + 1 - s)):
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
    elif (ids[:s] == ids[s]).any():
        out.add(
            "doc_ids",
            f"{where}: a document starting at column {s} shares its doc_id with tokens before "
            "it in the row, so it attends to them",
        )


def coverage(layout: Layout, docs: list[torch.Tensor]) -> list[str]:
    """What is missing, repeated or changed, against the documents given."""
    want = Counter(bytes(d.tolist()) for d in docs)
    missing, extra = want - layout.documents, layout.documents - want
    out = []
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
