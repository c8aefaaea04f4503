"""Reading a learner's batches back into documents: which runs of each row are whole
documents, what each would see (its positions, its doc_ids), and what is missing or extra
against the documents given. The packing check's correctness parts are made of this.

A piece is a run of columns whose targets chain (each the next column's token); it is read as
a document when its tokens plus its last target are one of the documents given, so both
layouts that train each document alone read the same: all its bytes in `tokens` (the last
one's target IGNORE), or nanoGPT's pairs (tokens d[:-1], targets d[1:]). A message about what
a piece sees is confirmed only where the piece is a whole document.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass, field

import torch

from .packing import ROW_LEN, field_of
from .text import IGNORE, VOCAB


@dataclass
class Row:
    """One row of a batch, as lists: what its pieces are read from."""

    where: str  # "batch b, row r"
    tokens: list
    targets: list
    doc_ids: list | None
    positions: list | None


@dataclass
class Piece:
    """A run of columns of one row, from `start` to `end`, whose targets carry loss: read as
    a document, its tokens plus its last target."""

    row: Row
    start: int
    end: int
    crosses: bool = False  # ended where doc_ids change, its last target the next one's token
    unmarked: bool = False  # starts where the chain of targets breaks with nothing to say why

    @property
    def doc(self) -> tuple:
        return (*self.row.tokens[self.start : self.end + 1], self.row.targets[self.end])


@dataclass
class Layout:
    """What a learner's batches hold, read from their tensors alone: the pieces of each row
    that carry targets, and `problems` by kind: batches that break the contract of
    `text.Batch` (shapes, dtypes: "targets", none of their pieces read) and values the model
    cannot take ("targets" for bytes, "positions"). Which pieces are whole documents, and so which
    of their problems are confirmed, is `diagnose`'s to say: it knows the documents."""

    pieces: list = field(default_factory=list)
    problems: dict[str, list[str]] = field(default_factory=dict)
    shapes: set = field(default_factory=set)
    max_rows: int = 0
    max_len: int = 0

    def add(self, kind: str, message: str) -> None:
        self.problems.setdefault(kind, []).append(message)


def _row(t: torch.Tensor | None, r: int) -> list[int] | None:
    return None if t is None else t[r].cpu().tolist()


# what each field may hold: a byte, a row of the check's models' position table (their
# Config.max_len is ROW_LEN); targets may also be IGNORE (F.cross_entropy's ignore_index)
RANGES = {"tokens": (0, VOCAB - 1), "targets": (0, VOCAB - 1), "positions": (0, ROW_LEN - 1)}


def _contract(b: int, fields: dict) -> str | None:
    """What makes batch `b` unreadable as a `text.Batch` (shapes, dtypes), or None."""
    tokens, targets = fields["tokens"], fields["targets"]
    if tokens is None or targets is None or tokens.dim() != 2 or tokens.shape != targets.shape:
        return f"batch {b} has no (rows, T) tokens and targets of one shape"
    for name, value in fields.items():
        if value is None:
            continue
        if tuple(value.shape) != tuple(tokens.shape):
            return (
                f"batch {b}: {name} has shape {tuple(value.shape)}, tokens "
                f"{tuple(tokens.shape)}: each field of a Batch is (rows, T), or None"
            )
        if value.dtype != torch.int64:
            return (
                f"batch {b}: {name} is {value.dtype}: a Batch holds int64 tensors (the "
                "embeddings and F.cross_entropy take int64)"
            )
    return None


def _ranges(b: int, fields: dict) -> dict[str, str]:
    """Values the model cannot take, by kind ("targets" for tokens and targets, "positions"),
    in a batch that keeps the contract: a byte, a row of the position table, or IGNORE."""
    out = {}
    pad = _padding(fields["tokens"], fields["targets"])
    for name, (low, high) in RANGES.items():
        value = fields[name]
        if value is None:
            continue
        bad = (value < low) | (value > high)
        if name == "targets":
            bad &= fields["targets"] != IGNORE
        if bad.any():
            table = "position table" if name == "positions" else "vocabulary of bytes"
            out.setdefault(
                "positions" if name == "positions" else "targets",
                (
                    f"batch {b}: {name} holds {int(value[bad][0])}, outside {low}-{high}"
                    + (" (or IGNORE)" if name == "targets" else "")
                    + f": the model's {table} has {high + 1} entries"
                    + (
                        " (padding needs one too, though its targets carry no loss)"
                        if bool(pad[bad].all())
                        else ""
                    )
                ),
            )
    return out


def _padding(tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Columns that hold no document: no target, and not a document's last token (the one
    its previous column's target names)."""
    before = torch.full_like(targets, IGNORE)
    before[:, 1:] = targets[:, :-1]
    last = (before != IGNORE) & (before == tokens)
    return (targets == IGNORE) & ~last


def read_layout(batches) -> Layout:
    """Recover the pieces of every row: runs of columns whose targets chain (each the next
    column's token, the last one excepted)."""
    out = Layout()
    for b, batch in enumerate(batches):
        names = ("tokens", "targets", "doc_ids", "positions")
        fields = {name: field_of(batch, name) for name in names}
        wrong = _contract(b, fields)
        if wrong is not None:
            out.add("targets", wrong)
            continue
        for kind, message in _ranges(b, fields).items():
            out.add(kind, message)
        tokens = fields["tokens"]
        out.shapes.add(tuple(tokens.shape))
        out.max_rows = max(out.max_rows, tokens.shape[0])
        out.max_len = max(out.max_len, tokens.shape[1])
        for r in range(tokens.shape[0]):
            row = Row(f"batch {b}, row {r}", *(_row(fields[n], r) for n in names))
            out.pieces += _pieces(row)
    return out


def _pieces(row: Row) -> list[Piece]:
    """The pieces of one row. A piece ends before a column without target, where doc_ids
    change, or where the chain of targets breaks: nanoGPT's pairs (tokens d[:-1], targets
    d[1:]) break it at each document's start; `unmarked` when neither doc_ids nor positions
    (a restart at 0) say a new document starts there. `crosses`: it ended where doc_ids
    change with its last target the next column's token (the next document's first byte, or
    by chance the last byte of nanoGPT's pairs: `diagnose` tells them apart)."""
    tok, tgt, ids, pos = row.tokens, row.targets, row.doc_ids, row.positions
    pieces, s, unmarked = [], None, False
    for t, target in enumerate(tgt):
        if target == IGNORE:
            if s is not None:
                pieces.append(Piece(row, s, t - 1, unmarked=unmarked))
            s = None
            continue
        if s is None:
            s, unmarked = t, False
            continue
        chained = tgt[t - 1] == tok[t]
        new_doc = ids is not None and ids[t] != ids[t - 1]
        if new_doc or not chained:
            pieces.append(Piece(row, s, t - 1, crosses=new_doc and chained, unmarked=unmarked))
            s, unmarked = t, not (new_doc or (pos is not None and pos[t] == 0))
    if s is not None:
        pieces.append(Piece(row, s, len(tgt) - 1, unmarked=unmarked))
    return pieces


def _seen(piece: Piece) -> dict[str, str]:
    """What is wrong with what a piece sees, by kind: its positions, its attention."""
    row, out = piece.row, {}
    if (said := _positions(row.positions, piece.start, piece.end)) is not None:
        out["positions"] = f"{row.where}: {said}"
    if (said := _attention(row.doc_ids, piece.start)) is not None:
        out["doc_ids"] = f"{row.where}: {said}"
    return out


def _positions(pos, s: int, e: int) -> str | None:
    """What is wrong with the positions of the tokens that predict (a document's last byte
    predicts nothing), or None."""
    if pos is None:
        if s != 0:
            return (
                f"a document starts at column {s} but positions is None (the model then "
                "numbers it from the row's start, not from 0)"
            )
    elif pos[s : e + 1] != list(range(e + 1 - s)):
        return (
            f"the positions of a document starting at column {s} do not count 0, 1, 2, ... "
            "from its first token"
        )
    return None


def _attention(ids, s: int) -> str | None:
    if s == 0:
        return None
    if ids is None:
        return (
            f"a document starts at column {s} with doc_ids None: it attends to the tokens "
            "before it in the row (another document, or padding)"
        )
    if ids[s] in ids[:s]:
        return (
            f"a document starting at column {s} shares its doc_id with tokens before it in "
            "the row, so it attends to them"
        )
    return None


CROSSES = (
    "a target crosses from one document into the next (a document's last token must have no target)"
)


def diagnose(layout: Layout, docs: list[torch.Tensor]) -> dict[str, list[str]]:
    """What is wrong, by kind ("targets", "positions", "doc_ids"), against the documents
    given. What a piece sees (its positions, its doc_ids) is reported only where the piece is
    read as a whole document: that is then what the document sees. A piece that is none is
    reported by what is missing or extra and, where it began at a break in the chain of
    targets that nothing explains, as a target that is not the next token."""
    want = Counter(tuple(d.tolist()) for d in docs)
    starts: dict[tuple, set] = {}  # (first two bytes) -> lengths of the documents
    for doc in want:
        starts.setdefault(doc[:2], set()).add(len(doc))
    out = {
        kind: list(layout.problems.get(kind, [])) for kind in ("targets", "positions", "doc_ids")
    }
    found, unexplained = Counter(), set()
    for piece in layout.pieces:
        readings = _reading(piece, want, starts)
        for read, doc in readings:
            found[doc] += 1
            if read.crosses:
                out["targets"].append(f"{read.row.where}: {CROSSES}")
            for kind, message in _seen(read).items():
                out[kind].append(message)
        if not readings:
            found[piece.doc] += 1
            if piece.unmarked and piece.row.where not in unexplained:
                unexplained.add(piece.row.where)
                out["targets"].append(
                    f"{piece.row.where}: the target at column {piece.start - 1} is not the "
                    f"token at column {piece.start}, and nothing there starts a new document "
                    "(doc_ids, positions)"
                )
    missing, extra = want - found, +found - want
    if missing:
        out["targets"].append(
            f"{sum(missing.values())} of {len(docs)} documents never reach the model whole"
        )
    if extra:
        out["targets"].append(
            f"{sum(extra.values())} documents appear that are not in the input (split, cut, "
            "repeated or merged)"
        )
    return out


def _reading(piece: Piece, want: Counter, starts: dict) -> list[tuple[Piece, tuple]]:
    """The piece as the documents read it, each part with its document: itself, when it is
    one; a document whose last target crosses into the next (`crosses`); or, its targets
    chained through several documents (each last token predicting the next one's first
    byte), those documents, each crossing into the next. [] when it is none of these."""
    doc = piece.doc
    if want[doc]:
        return [(dataclasses.replace(piece, crosses=False), doc)]
    if piece.crosses and want[doc[:-1]]:
        return [(piece, doc[:-1])]
    cuts = _segments(doc, want, starts)
    if cuts is None:
        return []
    bounds = [*cuts, len(doc)]
    parts = []
    for a, z in zip(bounds, bounds[1:], strict=False):
        last = z == len(doc)
        end = piece.start + (z - 2 if last else z - 1)
        part = Piece(piece.row, piece.start + a, end, crosses=not last, unmarked=False)
        parts.append((part, doc[a:z]))
    return parts


def _segments(doc: tuple, want: Counter, starts: dict) -> list[int] | None:
    """Offsets where `doc` splits into documents of `want` (at least two), or None. The
    last one keeps its final byte (the piece's last target); each other one is all its
    bytes, its last one's target being the next document's first byte."""
    reach: dict[int, list[int]] = {0: []}
    for i in range(len(doc) - 1):
        if i not in reach:
            continue
        for n in sorted(starts.get(doc[i : i + 2], ())):
            j = i + n
            if j > len(doc) or not want[doc[i:j]]:
                continue
            if j == len(doc):
                return reach[i] + [i] if reach[i] else None
            reach.setdefault(j, reach[i] + [i])
    return None
