"""Blind red team (b2) for the checks of lessons 12 and 13: 12-sdpa-attention, 12-packing,
12-graph-break, 13-choose-plan and 13-fully-shard.

Written from the learner notebooks alone (`notebooks/12_transformers.ipynb`,
`notebooks/13_fsdp.ipynb`: exercise text, hints, stubs, and what they show with
`cu.show_source`: `naive_attention`, `allowed`, `peak_bytes`, `ColleagueBlock`,
`packing_comparison`, `epoch`, `fake_peak`, `shard_blocks`), the signatures and docstrings a
learner reads with `help()` (`lesson.Batch`, `lesson.padded`, `lesson.pad_batches`,
`lesson.check_docs`, `lesson.block_pair`, `lesson.graphs_of`, `lesson.Scenario`,
`lesson.PLANS`, the check functions' docstrings, the limits `cu.show_limits` prints), the
README, docs/glossary.md and `redteam_helpers.py`; never the lessons' checks, probes,
references or tests, nor the other red-team files. Each case is a learner answer with the
verdict it deserves and, for a wrong one, the cause the failing parts must name (`names`) and
a cause they must not name (`not_names`), both regexes. Each check is called as its
notebook's check cell calls it. Cases the check gets wrong stay, marked with `open_holes`
(strict xfail).

Run: COURSE_QUICK=1 COURSE_REDTEAM=all pytest -q -p no:cacheprovider
tests/redteam/test_issue34_blind_b2.py
"""

from __future__ import annotations

import math
import os

os.environ.setdefault("COURSE_QUICK", "1")

import pytest
import torch
import torch.nn.functional as F
from redteam_helpers import assert_graded, case, grade, in_ci, open_holes

from course_utils.lessons import fsdp as lesson13
from course_utils.lessons import transformers as lesson12

# =============================================================================================
# 12-sdpa-attention: causal_attention(q, k, v, doc_ids=None) -> (B, H, T, D)
# =============================================================================================


def _keep(doc_ids, T, device):
    """(B, 1, T, T) boolean: causal and inside the query's document (True = attend)."""
    causal = torch.ones(T, T, dtype=torch.bool, device=device).tril()
    same = doc_ids[:, None, :, None] == doc_ids[:, None, None, :]
    return same & causal


def valid_bool_mask(q, k, v, doc_ids=None):
    """is_causal alone without documents; one broadcast (B, 1, T, T) boolean mask with them."""
    if doc_ids is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=_keep(doc_ids, q.shape[-2], q.device))


def valid_float_additive(q, k, v, doc_ids=None):
    """A float mask of 0 and -inf, added to the scores, also when there are no documents."""
    B, T = q.shape[0], q.shape[-2]
    ids = doc_ids if doc_ids is not None else torch.zeros(B, T, dtype=torch.long)
    keep = _keep(ids.to(q.device), T, q.device)
    bias = torch.zeros(keep.shape, dtype=q.dtype, device=q.device).masked_fill(~keep, -math.inf)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)


def valid_segment_mask_no_causal_flag(q, k, v, doc_ids=None):
    """Never is_causal: a (T, T) tril without documents, the document test built from segment
    starts (a cumulative sum of 'id changed') with them, explicit scale."""
    T, D = q.shape[-2], q.shape[-1]
    mask = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    if doc_ids is not None:
        starts = torch.ones_like(doc_ids)
        starts[:, 1:] = (doc_ids[:, 1:] != doc_ids[:, :-1]).long()
        seg = starts.cumsum(-1)
        mask = mask & (seg[:, None, :, None] == seg[:, None, None, :])
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=1 / math.sqrt(D))


def wrong_ignores_docs(q, k, v, doc_ids=None):
    """is_causal only: the documents packed before a token leak into its attention."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def wrong_docs_not_causal(q, k, v, doc_ids=None):
    """With documents, the same-document mask alone: a token sees its document's future."""
    if doc_ids is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    same = doc_ids[:, None, :, None] == doc_ids[:, None, None, :]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=same)


def wrong_float_ones_mask(q, k, v, doc_ids=None):
    """The right mask turned into 1.0 / 0.0 floats: added to the scores, it masks nothing."""
    if doc_ids is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    mask = _keep(doc_ids, q.shape[-2], q.device).to(q.dtype)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def wrong_inverted_mask(q, k, v, doc_ids=None):
    """True meaning 'masked out' (as in nn.MultiheadAttention's key_padding_mask): inverted."""
    if doc_ids is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=~_keep(doc_ids, q.shape[-2], None))


def wrong_mask_per_head(q, k, v, doc_ids=None):
    """The right mask, copied for every head: (B, H, T, T) bytes, more than half the scores."""
    if doc_ids is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    B, H, T, _ = q.shape
    mask = _keep(doc_ids, T, q.device).expand(B, H, T, T).contiguous()
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def wrong_by_hand_with_docs(q, k, v, doc_ids=None):
    """SDPA without documents; with them, the formula written out (right values, the whole
    float32 score matrix and its softmax in memory)."""
    if doc_ids is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~_keep(doc_ids, q.shape[-2], q.device), -math.inf)
    return scores.softmax(-1) @ v


def wrong_by_hand_without_docs(q, k, v, doc_ids=None):
    """The converse: SDPA only with documents, the formula written out without them."""
    if doc_ids is not None:
        return valid_bool_mask(q, k, v, doc_ids)
    return lesson12.naive_attention(q, k, v)


def wrong_first_row_mask(q, k, v, doc_ids=None):
    """The mask of row 0 used for every row (built from doc_ids[0], shape (T, T))."""
    if doc_ids is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=_keep(doc_ids[:1], q.shape[-2], None)[0, 0]
    )


def wrong_mask_without_head_dim(q, k, v, doc_ids=None):
    """A (B, T, T) mask, no head dimension: it lines up with (H, T, T), not (B, 1, T, T)."""
    if doc_ids is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=_keep(doc_ids, q.shape[-2], None)[:, 0]
    )


def wrong_detached(q, k, v, doc_ids=None):
    """Right values, computed under no_grad (copied from an evaluation loop): no gradients."""
    with torch.no_grad():
        return valid_bool_mask(q, k, v, doc_ids)


def wrong_mask_and_is_causal(q, k, v, doc_ids=None):
    """Both the same-document mask and is_causal=True (SDPA refuses them together)."""
    if doc_ids is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    same = doc_ids[:, None, :, None] == doc_ids[:, None, None, :]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=same, is_causal=True)


NOT_DOCS = r"memory|share|gradient"
ATTENTION = [
    case(valid_bool_mask, "passed"),
    case(valid_float_additive, "passed"),
    case(valid_segment_mask_no_causal_flag, "passed"),
    case(wrong_ignores_docs, names=r"doc", not_names=r"memory|share"),
    case(wrong_docs_not_causal, names=r"causal|future|later|earlier", not_names=NOT_DOCS),
    case(wrong_float_ones_mask, names=r"float|bool|add|mask", not_names=r"memory|gradient"),
    case(wrong_inverted_mask, names=r"true|invert|mask|nan|doc", not_names=r"memory|share"),
    case(wrong_mask_per_head, names=r"head|mask", not_names=r"causal|outputs"),
    case(wrong_by_hand_with_docs, names=r"memory|share|score", not_names=r"causal|gradient"),
    case(wrong_by_hand_without_docs, names=r"memory|share|score|sdpa", not_names=r"gradient"),
    case(
        wrong_first_row_mask,
        names=r"row 0|first row|every row|each row|rows share|batch row",
        not_names=r"memory|gradient",
    ),
    case(wrong_mask_without_head_dim, names=r"shape|broadcast|size|raised|head|doc"),
    case(wrong_detached, names=r"grad", not_names=r"memory|causal"),
    case(wrong_mask_and_is_causal, names=r"is_causal|attn_mask|both|mask"),
]
# closed after the round: the probe records the shape of the mask handed to SDPA, and a
# (B, H, T, T) mask is named as a copy per head
ATTENTION = in_ci(ATTENTION, {"valid-bool_mask", "wrong-ignores_docs"})


@pytest.mark.parametrize(("fn", "expect", "names", "not_names"), ATTENTION)
def test_sdpa_attention(fn, expect, names, not_names):
    causal_attention = fn
    assert_graded(grade(lesson12.check_attention, causal_attention), expect, names, not_names)


# =============================================================================================
# 12-packing: make_batches(docs, rows, row_len) -> list of lesson.Batch
# =============================================================================================

IGNORE = lesson12.IGNORE


def _first_fit(docs, capacity):
    """Rows (lists of documents) filled first-fit, in the order given."""
    rows, room = [], []
    for d in docs:
        for i, left in enumerate(room):
            if len(d) <= left:
                rows[i].append(d)
                room[i] -= len(d)
                break
        else:
            rows.append([d])
            room.append(capacity - len(d))
    return rows


def _next_fit(docs, capacity):
    """Rows filled in the order given; a new row when the next document does not fit."""
    rows, used = [[]], 0
    for d in docs:
        if used + len(d) > capacity:
            rows.append([])
            used = 0
        rows[-1].append(d)
        used += len(d)
    return rows


def _row(docs, width, pad_doc=-1, positions_from=0, chain=False, doc_id=lambda j, d: j):
    """One row of packed documents, padded to `width`: tokens, targets, positions, doc_ids."""
    tokens = torch.zeros(width, dtype=torch.long)
    targets = torch.full((width,), IGNORE, dtype=torch.long)
    positions = torch.zeros(width, dtype=torch.long)
    doc_ids = torch.full((width,), pad_doc, dtype=torch.long)
    at = 0
    for j, d in enumerate(docs):
        n = len(d)
        tokens[at : at + n] = d
        targets[at : at + n - 1] = d[1:]
        if chain and j + 1 < len(docs):  # the last token "predicts" the next document's first
            targets[at + n - 1] = docs[j + 1][0]
        positions[at : at + n] = torch.arange(positions_from, positions_from + n)
        doc_ids[at : at + n] = doc_id(j, d)
        at += n
    return tokens, targets, positions, doc_ids


def _batches(rows_of_docs, rows, width=None, positions=True, doc_ids=True, **row_kw):
    """`rows` rows per Batch, each as wide as its fullest row (or `width`)."""
    out = []
    for i in range(0, len(rows_of_docs), rows):
        group = rows_of_docs[i : i + rows]
        w = width or max(sum(len(d) for d in r) for r in group)
        t, y, p, ids = (
            torch.stack(x) for x in zip(*(_row(r, w, **row_kw) for r in group), strict=True)
        )
        out.append(lesson12.Batch(t, y, p if positions else None, ids if doc_ids else None))
    return out


def _longest_first(docs):
    return sorted(docs, key=len, reverse=True)


def valid_first_fit_decreasing(docs, rows, row_len):
    """Longest first, each into the first row with room; batches as wide as their fullest row."""
    return _batches(_first_fit(_longest_first(docs), row_len), rows)


def valid_bucketing(docs, rows, row_len):
    """No packing: documents sorted by length, `rows` at a time, each batch padded by
    lesson.padded to its longest (short rows, no mask needed)."""
    ordered = sorted(docs, key=len)
    return [lesson12.padded(ordered[i : i + rows]) for i in range(0, len(ordered), rows)]


def valid_next_fit_pad_as_doc0(docs, rows, row_len):
    """Next-fit in the order given, every row row_len wide, padding given doc id 0 (it comes
    after the first document, so causality keeps it out of that document's sight)."""
    return _batches(_next_fit(docs, row_len), rows, width=row_len, pad_doc=0)


def wrong_no_positions(docs, rows, row_len):
    """Packed, doc_ids kept, positions left None: every document after the first in a row
    starts at the position where it lands."""
    return _batches(_first_fit(_longest_first(docs), row_len), rows, positions=False)


def wrong_no_doc_ids(docs, rows, row_len):
    """Packed with positions restarted, but doc_ids None: plain causal attention across the
    documents of a row."""
    return _batches(_first_fit(_longest_first(docs), row_len), rows, doc_ids=False)


def wrong_positions_from_one(docs, rows, row_len):
    """Packed, positions counted from 1 in each document."""
    return _batches(_first_fit(_longest_first(docs), row_len), rows, positions_from=1)


def wrong_chained_targets(docs, rows, row_len):
    """Packed with positions and doc_ids, but each document's last token keeps the next
    document's first as its target (the row shifted by one, as for a stream)."""
    return _batches(_first_fit(_longest_first(docs), row_len), rows, chain=True)


def wrong_stream_cut(docs, rows, row_len):
    """Pre-training style: the documents concatenated and cut into rows of row_len, targets
    the next byte of the stream, no positions, no doc_ids."""
    stream = torch.cat(docs)
    n = (len(stream) - 1) // row_len
    tokens = stream[: n * row_len].view(n, row_len)
    targets = stream[1 : n * row_len + 1].view(n, row_len)
    return [lesson12.Batch(tokens[i : i + rows], targets[i : i + rows]) for i in range(0, n, rows)]


def wrong_doc_ids_by_length(docs, rows, row_len):
    """Each document's id is its length: longest first, equal lengths land side by side in a
    row and share an id, so the second sees the first."""
    rows_of_docs = _first_fit(_longest_first(docs), row_len)
    return _batches(rows_of_docs, rows, doc_id=lambda j, d: len(d))


def wrong_doc_ids_alternate(docs, rows, row_len):
    """Ids that only change at each boundary (0, 1, 0, 1...): the third document of a row
    shares the first one's id and sees it."""
    rows_of_docs = _first_fit(_longest_first(docs), row_len)
    return _batches(rows_of_docs, rows, doc_id=lambda j, d: j % 2)


def wrong_pad_to_row_len(docs, rows, row_len):
    """One document per row, every batch padded to row_len: right loss, all the padding."""
    return [lesson12.padded(docs[i : i + rows], row_len) for i in range(0, len(docs), rows)]


def wrong_one_big_batch(docs, rows, row_len):
    """Packed well, but all rows in one Batch: `rows` read as a hint, not a limit."""
    return _batches(_first_fit(_longest_first(docs), row_len), rows=10**6)


def wrong_row_len_256(docs, rows, row_len):
    """Packed into rows of 256, the notebook's row_len, whatever row_len is asked."""
    return _batches(_first_fit(_longest_first(docs), 256), rows)


def wrong_drops_last_partial(docs, rows, row_len):
    """Bucketing, only full batches (drop_last=True): 48 documents at rows=8 lose nothing,
    other numbers of rows lose the remainder."""
    ordered = sorted(docs, key=len)
    full = len(ordered) // rows * rows
    return [lesson12.padded(ordered[i : i + rows]) for i in range(0, full, rows)]


SPEED = r"speed|fast|slow|per real token|tokens/s|\dx"
PACKING = [
    case(valid_first_fit_decreasing, "passed"),
    case(valid_bucketing, "passed"),
    case(valid_next_fit_pad_as_doc0, "passed"),
    case(wrong_no_positions, names=r"position", not_names=r"doc_ids|" + SPEED),
    case(wrong_no_doc_ids, names=r"doc_ids|attention|sees|see ", not_names=r"position"),
    case(wrong_positions_from_one, names=r"position", not_names=r"doc_ids|" + SPEED),
    case(wrong_chained_targets, names=r"target|last|ignore|next document|cross|chain"),
    case(wrong_stream_cut, names=r"target|document|cross|chain|first|once"),
    case(wrong_doc_ids_by_length, names=r"attention|attend|doc_ids|sees|same id"),
    case(wrong_doc_ids_alternate, names=r"attention|attend|doc_ids|sees|same id"),
    case(wrong_pad_to_row_len, names=SPEED, not_names=r"position|doc_ids|target"),
    case(wrong_one_big_batch, names=r"rows", not_names=r"position|doc_ids"),
    case(wrong_row_len_256, names=r"row_len|long|wide|columns|tokens", not_names=r"position"),
    case(wrong_drops_last_partial, names=r"missing|once|every|dropped|not a target|lost"),
]
PACKING_HOLES: dict[str, str] = {}
PACKING = open_holes(PACKING, PACKING_HOLES)
PACKING = in_ci(PACKING, set())  # every call times batches: 10-30 s each


@pytest.mark.parametrize(("fn", "expect", "names", "not_names"), PACKING)
def test_packing(fn, expect, names, not_names):
    make_batches = fn
    assert_graded(grade(lesson12.check_packing, make_batches), expect, names, not_names)


# =============================================================================================
# 12-graph-break: class FixedBlock(lesson.ColleagueBlock), forward(x, doc_ids=None)
# =============================================================================================


def _rms(h):
    return h.pow(2).mean().sqrt()


def valid_detached_tensor():
    """The statistic kept as a detached 0-d tensor; the dashboard's float() syncs on read."""

    class FixedBlock(lesson12.ColleagueBlock):
        def forward(self, x, doc_ids=None):
            assert x.dim() == 3, "expects (batch, time, channels)"
            h = self.attn(self.ln1(x), doc_ids)
            x = x + h
            self.last_rms = _rms(h.detach())
            return x + self.mlp(self.ln2(x))

    return FixedBlock


def valid_buffer_property():
    """A non-persistent buffer written in place under no_grad, read by a property as a
    one-element (1,) tensor, computed with linalg.vector_norm."""

    class FixedBlock(lesson12.ColleagueBlock):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.register_buffer("_rms", torch.zeros(1), persistent=False)

        @property
        def last_rms(self):
            return self._rms

        @last_rms.setter
        def last_rms(self, value):  # ColleagueBlock or Block may set it
            if value is not None:
                self._rms.fill_(float(value))

        def forward(self, x, doc_ids=None):
            h = self.attn(self.ln1(x), doc_ids)
            x = x + h
            with torch.no_grad():
                self._rms.copy_(torch.linalg.vector_norm(h).reshape(1) / math.sqrt(h.numel()))
            return x + self.mlp(self.ln2(x))

    return FixedBlock


def valid_lazy_float_property():
    """The detached mean square kept; the property returns the Python float on demand."""

    class FixedBlock(lesson12.ColleagueBlock):
        @property
        def last_rms(self):
            return float(self._mean_square.sqrt())

        @last_rms.setter
        def last_rms(self, value):
            pass

        def forward(self, x, doc_ids=None):
            h = self.attn(self.ln1(x), doc_ids)
            self._mean_square = h.detach().square().mean()
            x = x + h
            return x + self.mlp(self.ln2(x))

    return FixedBlock


def wrong_float_call():
    """`.item()` swapped for `float(...)`: the same call underneath, the same break."""

    class FixedBlock(lesson12.ColleagueBlock):
        def forward(self, x, doc_ids=None):
            h = self.attn(self.ln1(x), doc_ids)
            x = x + h
            self.last_rms = float(_rms(h.detach()))
            return x + self.mlp(self.ln2(x))

    return FixedBlock


def wrong_not_detached():
    """A tensor, not detached: one graph, but it holds this step's autograd graph alive."""

    class FixedBlock(lesson12.ColleagueBlock):
        def forward(self, x, doc_ids=None):
            h = self.attn(self.ln1(x), doc_ids)
            x = x + h
            self.last_rms = _rms(h)
            return x + self.mlp(self.ln2(x))

    return FixedBlock


def wrong_compiler_disable():
    """The .item() moved into a helper under torch.compiler.disable: still a break."""

    @torch.compiler.disable
    def record(block, h):
        block.last_rms = _rms(h).item()

    class FixedBlock(lesson12.ColleagueBlock):
        def forward(self, x, doc_ids=None):
            h = self.attn(self.ln1(x), doc_ids)
            x = x + h
            record(self, h.detach())
            return x + self.mlp(self.ln2(x))

    return FixedBlock


def wrong_global_capture_scalars():
    """Dynamo's warning followed: capture_scalar_outputs=True, process-wide; .item() kept."""
    torch._dynamo.config.capture_scalar_outputs = True
    return lesson12.ColleagueBlock


def wrong_rms_after_residual():
    """The statistic of x + h, the residual stream, not of the attention output."""

    class FixedBlock(lesson12.ColleagueBlock):
        def forward(self, x, doc_ids=None):
            x = x + self.attn(self.ln1(x), doc_ids)
            self.last_rms = _rms(x.detach())
            return x + self.mlp(self.ln2(x))

    return FixedBlock


def wrong_mean_square():
    """The sqrt forgotten: the mean square, not its root."""

    class FixedBlock(lesson12.ColleagueBlock):
        def forward(self, x, doc_ids=None):
            h = self.attn(self.ln1(x), doc_ids)
            x = x + h
            self.last_rms = h.detach().pow(2).mean()
            return x + self.mlp(self.ln2(x))

    return FixedBlock


def wrong_per_token_rms():
    """RMS over the channels only: one value per token, not one number."""

    class FixedBlock(lesson12.ColleagueBlock):
        def forward(self, x, doc_ids=None):
            h = self.attn(self.ln1(x), doc_ids)
            x = x + h
            self.last_rms = h.detach().pow(2).mean(-1).sqrt()
            return x + self.mlp(self.ln2(x))

    return FixedBlock


def wrong_drops_doc_ids():
    """Rewritten from memory: the attention called without doc_ids."""

    class FixedBlock(lesson12.ColleagueBlock):
        def forward(self, x, doc_ids=None):
            h = self.attn(self.ln1(x))
            x = x + h
            self.last_rms = _rms(h.detach())
            return x + self.mlp(self.ln2(x))

    return FixedBlock


def wrong_eager_only():
    """`.item()` kept, skipped while compiling: one graph, but compiled calls record nothing."""

    class FixedBlock(lesson12.ColleagueBlock):
        def forward(self, x, doc_ids=None):
            h = self.attn(self.ln1(x), doc_ids)
            x = x + h
            if not torch.compiler.is_compiling():
                self.last_rms = _rms(h.detach()).item()
            return x + self.mlp(self.ln2(x))

    return FixedBlock


def wrong_recorded_once():
    """A tensor made on the first call and never updated after (the `hasattr` guard meant
    for creating it wraps the write too)."""

    class FixedBlock(lesson12.ColleagueBlock):
        def forward(self, x, doc_ids=None):
            h = self.attn(self.ln1(x), doc_ids)
            x = x + h
            if not isinstance(getattr(self, "last_rms", None), torch.Tensor):
                self.last_rms = _rms(h.detach())
            return x + self.mlp(self.ln2(x))

    return FixedBlock


BREAK = [
    case(valid_detached_tensor, "passed"),
    case(valid_buffer_property, "passed"),
    case(valid_lazy_float_property, "passed"),
    case(wrong_float_call, names=r"graph|break|item|float", not_names=r"alive|grad_fn"),
    case(wrong_not_detached, names=r"alive|grad_fn|detach|autograd", not_names=r"break"),
    case(wrong_compiler_disable, names=r"graph|break", not_names=r"alive|grad_fn"),
    case(wrong_global_capture_scalars, names=r"graph|break|item", not_names=r"alive|grad_fn"),
    case(wrong_rms_after_residual, names=r"last_rms|statistic|rms", not_names=r"graph|break"),
    case(wrong_mean_square, names=r"last_rms|statistic|rms", not_names=r"graph|break|shape"),
    case(wrong_per_token_rms, names=r"shape|one.element|one number|element"),
    case(
        wrong_drops_doc_ids,
        names=r"doc_ids|output",
        not_names=r"graph|break|not recorded|every call",
    ),
    case(wrong_eager_only, names=r"compiled|record", not_names=r"alive|break"),
    case(wrong_recorded_once, names=r"once|second|every call|record", not_names=r"break"),
]
# closed after the round: where the outputs with doc_ids differ, the second call's
# statistic names no cause (a block that ignores doc_ids repeats the first value)
BREAK = in_ci(BREAK, {"valid-detached_tensor", "wrong-float_call"})


@pytest.mark.parametrize(("fn", "expect", "names", "not_names"), BREAK)
def test_graph_break(fn, expect, names, not_names):
    saved = torch._dynamo.config.capture_scalar_outputs
    try:
        FixedBlock = fn()
        assert_graded(grade(lesson12.check_graph_break, FixedBlock), expect, names, not_names)
    finally:
        torch._dynamo.config.capture_scalar_outputs = saved
        torch._dynamo.reset()


# =============================================================================================
# 13-choose-plan: choose_plan(scenario) -> (strategy, reshard_after_forward)
# =============================================================================================

ORDER = ["DDP", "ZeRO-1", "FSDP2, keep", "FSDP2, reshard"]  # least communication first


def _need(scenario, plan, ranks=None):
    """The plan's peak on its fullest rank, as lesson.fake_peak measures it."""
    strategy, reshard = lesson13.PLANS[plan]
    ranks = range(scenario.world_size) if ranks is None else ranks
    return max(
        lesson13.fake_peak(
            scenario.model,
            strategy,
            scenario.optimizer,
            scenario.batch,
            scenario.world_size,
            reshard=reshard,
            rank=r,
        )
        for r in ranks
    )


def valid_first_that_fits(scenario):
    """The first plan, least communication first, whose fullest rank fits."""
    for plan in ORDER:
        if _need(scenario, plan) <= scenario.device_bytes:
            return lesson13.PLANS[plan]
    return lesson13.PLANS["FSDP2, reshard"]


def valid_fits_table_no_zero_for_sgd(scenario):
    """Every plan's need first, then the cheapest that fits; ZeRO-1 not considered under
    plain SGD (no state to shard, only a broadcast more than DDP)."""
    order = [p for p in ORDER if not (p == "ZeRO-1" and scenario.optimizer == "sgd")]
    needs = {plan: _need(scenario, plan) for plan in order}
    fitting = [plan for plan in order if needs[plan] <= scenario.device_bytes]
    return lesson13.PLANS[fitting[0] if fitting else "FSDP2, reshard"]


def valid_with_headroom(scenario):
    """First that fits with 5% of the device left free (for the allocator's fragmentation)."""
    for plan in ORDER:
        if _need(scenario, plan) * 1.05 <= scenario.device_bytes:
            return lesson13.PLANS[plan]
    return lesson13.PLANS["FSDP2, reshard"]


def wrong_always_reshard(scenario):
    """The safe choice every time: FSDP2, resharding after forward."""
    return ("fsdp", True)


def wrong_always_ddp(scenario):
    """DDP every time: the fastest, whether it fits or not."""
    return ("ddp", False)


def wrong_rank0_only(scenario):
    """First plan that fits, judged by rank 0's peak alone."""
    for plan in ORDER:
        if _need(scenario, plan, ranks=[0]) <= scenario.device_bytes:
            return lesson13.PLANS[plan]
    return lesson13.PLANS["FSDP2, reshard"]


def wrong_mean_of_ranks(scenario):
    """First plan that fits, judged by the ranks' mean peak: 'per device' read as average."""
    for plan in ORDER:
        strategy, reshard = lesson13.PLANS[plan]
        peaks = [
            lesson13.fake_peak(
                scenario.model,
                strategy,
                scenario.optimizer,
                scenario.batch,
                scenario.world_size,
                reshard=reshard,
                rank=r,
            )
            for r in range(scenario.world_size)
        ]
        if sum(peaks) / len(peaks) <= scenario.device_bytes:
            return lesson13.PLANS[plan]
    return lesson13.PLANS["FSDP2, reshard"]


def _held(scenario, strategy):
    """Bytes held after a step on one rank, from the parameters alone (no activations, no
    scratch, no gathered parameters): what lesson 13's exercise 1 predicts."""
    params = [p for p in scenario.model.parameters()]
    p_bytes = sum(p.numel() * p.element_size() for p in params)
    trained = sum(p.numel() * p.element_size() for p in params if p.requires_grad)
    state = {"sgd": 0, "momentum": 1, "adam": 2}[scenario.optimizer] * trained
    n = scenario.world_size
    return {"ddp": p_bytes + trained + state, "zero1": p_bytes + trained + state / n}.get(
        strategy, (p_bytes + trained + state) / n
    )


def wrong_held_not_peak(scenario):
    """Fit judged by what a rank holds after the step (parameters, gradients, state), not by
    the step's peak; FSDP2 kept if it fits that way."""
    for plan in ORDER:
        strategy, _ = lesson13.PLANS[plan]
        if _held(scenario, strategy) <= scenario.device_bytes:
            return lesson13.PLANS[plan]
    return lesson13.PLANS["FSDP2, reshard"]


def wrong_reshard_before_keep(scenario):
    """First that fits, but FSDP2 resharding tried before keeping ('reshard is the default')."""
    order = ["DDP", "ZeRO-1", "FSDP2, reshard", "FSDP2, keep"]
    for plan in order:
        if _need(scenario, plan) <= scenario.device_bytes:
            return lesson13.PLANS[plan]
    return lesson13.PLANS["FSDP2, reshard"]


def wrong_default_reshard_in_need(scenario):
    """fake_peak called without reshard= (its default, True) for every plan: FSDP2 keeping is
    judged by resharding's smaller need."""
    for plan in ORDER:
        strategy, reshard = lesson13.PLANS[plan]
        need = max(
            lesson13.fake_peak(
                scenario.model,
                strategy,
                scenario.optimizer,
                scenario.batch,
                scenario.world_size,
                rank=r,
            )
            for r in range(scenario.world_size)
        )
        if need <= scenario.device_bytes:
            return (strategy, reshard)
    return ("fsdp", True)


PLAN = [
    case(valid_first_that_fits, "passed"),
    case(valid_fits_table_no_zero_for_sgd, "passed"),
    case(valid_with_headroom, "passed"),
    case(wrong_always_reshard, names=r"faster|all-gather|fewer", not_names=r"needs .* too much"),
    case(wrong_always_ddp, names=r"fit|memory|peak|bytes"),
    case(wrong_rank0_only, names=r"fit|rank|fullest", not_names=r"faster|fewer"),
    case(wrong_mean_of_ranks, names=r"fit|rank|fullest", not_names=r"faster|fewer"),
    case(wrong_held_not_peak, names=r"fit|peak|activation", not_names=r"faster|fewer"),
    case(wrong_reshard_before_keep, names=r"all-gather|fewer|keep", not_names=r"does not fit"),
    case(wrong_default_reshard_in_need, names=r"fit|peak|reshard", not_names=r"faster|fewer"),
]
# closed: the mean-of-ranks hole (the device sat below ZeRO-1's mean in every scenario); the
# scenario "ZeRO-1 fits on average, not on rank 1" puts it between the mean and rank 1
PLAN_HOLES: dict[str, str] = {}
PLAN = open_holes(PLAN, PLAN_HOLES)
PLAN = in_ci(PLAN, set())  # launches every plan on two processes: minutes


@pytest.mark.parametrize(("fn", "expect", "names", "not_names"), PLAN)
def test_choose_plan(fn, expect, names, not_names):
    choose_plan = fn
    assert_graded(grade(lesson13.check_plan, choose_plan), expect, names, not_names)


# =============================================================================================
# 13-fully-shard: shard.py with shard_model(model), FSDP2 in place (two processes per case)
# =============================================================================================

HEADER = '''"""FSDP2 on the lesson's model (imported by the check's worker processes)."""
import copy

import torch
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard


def shard_model(model):
'''

SHARD_FILES = {
    "valid_keep_gathered": """    # every block kept gathered until backward, then the root
    for block in model.blocks:
        fully_shard(block, reshard_after_forward=False)
    fully_shard(model)
""",
    "valid_head_own_group": """    # the head its own group too, so the root holds no parameter of its own
    for block in model.blocks:
        fully_shard(block)
    fully_shard(model.head)
    fully_shard(model)
    return None
""",
    "wrong_blocks_only": """    # only the blocks: the head stays a plain tensor on each rank
    for block in model.blocks:
        fully_shard(block)
    return model
""",
    "wrong_root_only": """    # one call on the root: the whole model one group, gathered whole
    fully_shard(model)
    return model
""",
    "wrong_bf16_policy": """    # section 5's policy: all-gathers in bf16
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    for block in model.blocks:
        fully_shard(block, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    return model
""",
    "wrong_shards_a_copy": """    # 'in place' missed: a sharded copy returned, the model passed left whole
    sharded = copy.deepcopy(model)
    for block in sharded.blocks:
        fully_shard(block)
    fully_shard(sharded)
    return sharded
""",
}


def _shard_case(name, expect="failed", names=None, not_names=None):
    kind = "valid" if name.startswith("valid_") else "wrong"
    return pytest.param(name, expect, names, not_names, id=f"{kind}-{name[6:]}")


SHARD = [
    _shard_case("valid_keep_gathered", "passed"),
    _shard_case("valid_head_own_group", "passed"),
    _shard_case("wrong_blocks_only", names=r"head|not sharded|group|drift|differ"),
    _shard_case(
        "wrong_root_only", names=r"all-gather|whole|block|group", not_names=r"never averaged"
    ),
    _shard_case("wrong_bf16_policy", names=r"bf16|bfloat16|float32|precision|dtype"),
    _shard_case("wrong_shards_a_copy", names=r"in place|not sharded|returns|passed|half"),
]
# closed after the round: the probe records the dtype each layer's weight has in its
# forward, and a lower precision than float32 is named as the MixedPrecisionPolicy's
SHARD = in_ci(SHARD, set())  # a two-process launch per case: 20-90 s each


@pytest.mark.parametrize(("name", "expect", "names", "not_names"), SHARD)
def test_fully_shard(name, expect, names, not_names, tmp_path):
    path = tmp_path / "shard.py"
    path.write_text(HEADER + SHARD_FILES[name])
    assert_graded(grade(lesson13.check_shard, path), expect, names, not_names)
