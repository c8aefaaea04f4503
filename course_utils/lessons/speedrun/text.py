"""Lesson 18's data: lesson 12's text (CPython's help topics, bytes, no download), split once
into documents to train on and documents the check alone scores.

Every 10th document (in a fixed shuffle) is validation text: `validation_docs` is guarded, so
learner code that reads it while a check runs fails, naming it. Each timed call of a speed-run
is given the training documents under a byte cipher (`cipher`, a permutation of the 256 byte
values drawn per call) and its model is scored on the validation documents under the same
cipher: a model that learned from anything but its argument (the plain text, another call's
cipher, weights kept from before) predicts the wrong bytes, and scores better on the
validation text under another cipher than under its own (lesson 11's renamed classes, for text).
"""

from __future__ import annotations

import functools
import random
import re

import torch

from ...checks import held_out
from ...mode import pick

VOCAB = 256  # bytes
IGNORE = -100  # a target that carries no loss (F.cross_entropy's ignore_index)
EVERY = 10  # one document in EVERY is validation text


def row_len() -> int:
    """The longest row in bytes: a document longer than this is cut into several."""
    return pick(quick=128, full=256)


def n_validation() -> int:
    """Validation documents scored per run (enough for a loss steady to ~0.01 nats)."""
    return pick(quick=64, full=400)


@functools.cache
def _documents(length: int) -> tuple[bytes, ...]:
    """The help topics (sorted by name) split into paragraphs, cut at `length` bytes, each
    distinct piece once, shuffled with a fixed seed."""
    from pydoc_data.topics import topics

    text = "\n\n".join(topics[k] for k in sorted(topics))
    docs = []
    for p in re.split(r"\n\s*\n", text):
        p = p.strip("\n").encode()
        docs += [p[i : i + length] for i in range(0, len(p), length) if len(p[i : i + length]) > 1]
    docs = list(dict.fromkeys(docs))  # a paragraph repeated across topics: once, on one side
    random.Random(18).shuffle(docs)
    return tuple(docs)


def _tensor(doc: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(doc), dtype=torch.uint8).long()


def cipher(seed: int) -> torch.Tensor:
    """A permutation of the 256 byte values (seed 0: the identity, the plain text)."""
    if seed == 0:
        return torch.arange(VOCAB)
    return torch.randperm(VOCAB, generator=torch.Generator().manual_seed(seed))


class TrainText:
    """The training documents as a speed-run receives them: `text[i]` is document i, a 1-D
    int64 tensor of byte values (under the call's cipher); `len(text)` documents. Counts the
    documents read (`reads`), as lesson 11's watch counts images."""

    def __init__(self, key: int = 0):
        docs = [d for i, d in enumerate(_documents(row_len())) if i % EVERY]
        table = cipher(key)
        self._docs = [table[_tensor(d)] for d in docs]
        self.reads: set[int] = set()

    def __len__(self) -> int:
        return len(self._docs)

    def __getitem__(self, i: int) -> torch.Tensor:
        i = range(len(self._docs))[i]  # negative indices, IndexError past the end
        self.reads.add(i)
        return self._docs[i]

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def tokens(self) -> int:
        return sum(len(d) for d in self._docs)


def training_text() -> TrainText:
    """The training documents, plain (the notebook's; the check ciphers each call's)."""
    return TrainText(0)


@held_out
def validation_docs(key: int = 0) -> list[torch.Tensor]:
    """The validation documents the check scores, under cipher `key`. Guarded: learner code
    that calls it while a check runs fails (HeldOutUsed)."""
    docs = [d for i, d in enumerate(_documents(row_len())) if not i % EVERY]
    table = cipher(key)
    return [table[_tensor(d)] for d in docs[: n_validation()]]
