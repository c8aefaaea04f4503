"""Lesson 12's data: bytes of text every Python has (no download), as documents of mixed lengths.

The text is CPython's own help texts, `pydoc_data.topics.topics` (what `help("if")` shows),
about 460 kB in 80 topics. Byte-level: a token is one byte (vocabulary 256), so no tokenizer
is needed. `documents` splits the topics into paragraphs: a few thousand documents of a few
bytes to a few kilobytes, the skewed length mix that padding wastes compute on. The exact
text differs a little between Python versions; every figure is measured on the one at hand.
"""

from __future__ import annotations

import functools
import random
import re
from dataclasses import dataclass

import torch

VOCAB = 256  # bytes
IGNORE = -100  # a target that carries no loss (F.cross_entropy's ignore_index)


@functools.cache
def corpus() -> bytes:
    """All the help topics, in a fixed order (sorted by topic name), as one byte string."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[k] for k in sorted(topics)).encode()


def stream(device: torch.device | str = "cpu") -> torch.Tensor:
    """The corpus as one long int64 tensor of byte values."""
    return torch.frombuffer(bytearray(corpus()), dtype=torch.uint8).long().to(device)


@functools.cache
def _paragraphs() -> tuple[bytes, ...]:
    text = corpus().decode()
    return tuple(p.strip("\n").encode() for p in re.split(r"\n\s*\n", text) if p.strip())


def documents(max_len: int, limit: int | None = None, seed: int = 0) -> list[torch.Tensor]:
    """The paragraphs as 1-D int64 tensors of at most `max_len` bytes each (a longer paragraph
    becomes several documents), shuffled with `seed`; the first `limit` if given."""
    docs = []
    for p in _paragraphs():
        for i in range(0, len(p), max_len):
            piece = p[i : i + max_len]
            if len(piece) >= 2:  # one byte predicts nothing
                docs.append(torch.frombuffer(bytearray(piece), dtype=torch.uint8).long())
    random.Random(seed).shuffle(docs)
    return docs[:limit] if limit else docs


@dataclass
class Batch:
    """One training batch of `rows` rows of `T` tokens.

    tokens, targets, positions, doc_ids: (rows, T) int64. `targets[r, t]` is the token that
    should follow `tokens[r, t]`, or IGNORE (-100) where there is none (a document's last
    token, padding). `positions` restart at 0 at each document's first token. `doc_ids` say
    which document a token belongs to, per row; attention stays inside a document. None
    means one document per row, starting at column 0 (a plain causal mask suffices).
    """

    tokens: torch.Tensor
    targets: torch.Tensor
    positions: torch.Tensor | None = None
    doc_ids: torch.Tensor | None = None

    @property
    def real_targets(self) -> int:
        return int((self.targets != IGNORE).sum())

    @property
    def slots(self) -> int:
        return self.tokens.numel()

    def to(self, device) -> Batch:
        move = lambda t: None if t is None else t.to(device)  # noqa: E731
        return Batch(*(move(t) for t in (self.tokens, self.targets, self.positions, self.doc_ids)))


def padded(docs: list[torch.Tensor], length: int | None = None) -> Batch:
    """One document per row, padded at the end to `length` (default: the longest here). Pad
    tokens are 0 and carry no loss; positions count from 0 in each row."""
    T = length or max(len(d) for d in docs)
    tokens = torch.zeros(len(docs), T, dtype=torch.long)
    targets = torch.full((len(docs), T), IGNORE, dtype=torch.long)
    for r, d in enumerate(docs):
        tokens[r, : len(d)] = d
        targets[r, : len(d) - 1] = d[1:]
    positions = torch.arange(T).expand(len(docs), T).contiguous()
    return Batch(tokens, targets, positions, None)


def pad_batches(docs: list[torch.Tensor], rows: int, row_len: int) -> list[Batch]:
    """The default: documents in the order given, `rows` per batch, each batch padded to its
    longest document (a plain DataLoader with a padding collate)."""
    return [padded(docs[i : i + rows]) for i in range(0, len(docs), rows)]


def pad_to_row_len(docs: list[torch.Tensor], rows: int, row_len: int) -> list[Batch]:
    """Every batch padded to `row_len` (one fixed shape: what a compiled model likes most)."""
    return [padded(docs[i : i + rows], row_len) for i in range(0, len(docs), rows)]


@dataclass
class Waste:
    """What a list of batches spends its token slots on."""

    batches: int
    slots: int
    real: int  # targets that carry loss

    @property
    def padding(self) -> float:
        """Share of token slots that carry no loss."""
        return 1 - self.real / self.slots if self.slots else 0.0


def waste(batches: list[Batch]) -> Waste:
    return Waste(len(batches), sum(b.slots for b in batches), sum(b.real_targets for b in batches))


def lm_batches(rows: int, T: int, n: int, seed: int = 0) -> list[Batch]:
    """`n` batches of random windows of the running text, for plain language-model training
    (every slot a real token; no documents)."""
    data = stream()
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        start = torch.randint(0, len(data) - T - 1, (rows,), generator=g)
        idx = start[:, None] + torch.arange(T + 1)
        chunk = data[idx]
        out.append(Batch(chunk[:, :-1].contiguous(), chunk[:, 1:].contiguous()))
    return out
