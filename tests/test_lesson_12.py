"""Lesson 12's checks pass the reference answers and valid alternatives, and fail the
mistakes learners make with a message that names the cause.

The attention and graph-break checks are deterministic (outputs, bytes, graph counts). The
packing check's speed part is timed: the reference and the padding baseline are timed once
each (their ratios sit far from the threshold: 1.5-1.7x and 1.0x); every other packing case
fails before the timing, on a correctness part.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import replace

import pytest
import torch
import torch.nn.functional as F
from check_helpers import fails, failure, not_attempted

from course_utils import inductor
from course_utils.lessons import transformers as lesson
from course_utils.lessons.transformers import layout, packing, text

REF_BATCHES = lesson.reference_make_batches.__wrapped__  # callable from a learner's answer


def part(result, name: str):
    parts = result.parts if hasattr(result, "parts") else result
    return next(p for p in parts if p.name.startswith(name))


# --- the lesson's pieces -----------------------------------------------------------------------


def test_documents_come_from_pythons_own_help_texts_cut_at_the_row_length():
    docs = lesson.documents(256)
    assert len(docs) > 1000 and all(2 <= len(d) <= 256 for d in docs)
    assert all(
        torch.equal(a, b) for a, b in zip(lesson.documents(256, limit=5), docs[:5], strict=True)
    )


def test_a_padded_row_predicts_the_next_byte_and_nothing_after_the_document():
    batch = lesson.padded([torch.tensor([5, 6, 7]), torch.tensor([8, 9])])
    assert batch.tokens.tolist() == [[5, 6, 7], [8, 9, 0]]
    assert batch.targets.tolist() == [[6, 7, -100], [9, -100, -100]]
    assert batch.real_targets == 3


def test_the_first_loss_of_a_fresh_model_is_a_uniform_guess_over_bytes():
    model = lesson.build(cfg=lesson.Config(d_model=32, n_head=2, n_layer=1, max_len=64))
    loss = lesson.loss(model, lesson.lm_batches(4, 64, 1)[0])
    assert abs(loss.item() - math.log(256)) < 0.1


def test_the_hand_written_attention_grows_with_t_squared_and_sdpa_with_t():
    sdpa = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)  # noqa: E731
    table = lesson.attention_memory([128, 256], sdpa)
    assert table[256][0] / table[128][0] == pytest.approx(4, rel=0.1)
    assert table[256][1] / table[128][1] == pytest.approx(2, rel=0.1)
    assert table[256][0] > table[256][2] > 10 * table[256][1]


def test_a_cpu_runs_the_flash_style_kernel_and_has_no_cuda_only_ones():
    found = lesson.backends(*lesson.qkv(1, 2, 32, 8))
    assert found["MATH"] == "runs" and found["EFFICIENT_ATTENTION"].startswith("not here")
    assert "attention" in found["default"]


def test_the_backend_probe_asks_a_gpu_in_its_16_bit_type_and_a_cpu_in_float32(monkeypatch):
    """FlashAttention and cuDNN take only fp16 and bf16: a float32 probe on a GPU would see
    them refuse for the dtype (issue 34). On a CPU the flash-style kernel takes float32."""
    from course_utils.lessons.transformers import attention

    assert lesson.probe_dtype("cpu") == torch.float32
    monkeypatch.setattr(attention, "amp_dtype", lambda device: torch.float16)
    assert lesson.probe_dtype(torch.device("cuda")) == torch.float16


def test_a_cpus_flash_style_kernel_takes_a_boolean_document_mask():
    ids = lesson.random_docs(2, 32, 3)
    found = lesson.backends(*lesson.qkv(2, 2, 32, 8), lesson.allowed(ids, 32))
    assert found["FLASH_ATTENTION"] == "runs" and "flash" in found["default"]


def test_flex_attention_has_no_backward_on_a_cpu_in_this_torch():
    """What section 3 and flex_support say: torch refuses FlexAttention inputs that require
    grad on a CPU, eager or compiled (the check is in flex_attention itself)."""
    from torch.nn.attention.flex_attention import flex_attention

    q, k, v = (t.requires_grad_() for t in lesson.qkv(1, 1, 16, 8))
    with pytest.raises(NotImplementedError, match="does not support backward on CPU"):
        flex_attention(q, k, v)
    ok, why = lesson.flex_support(torch.device("cpu"))
    assert not ok and "forward only" in why and "needs a GPU" in why


def test_flex_attention_computes_the_block_diagonal_mask_sdpa_computes():
    """The GPU path of section 3, run eagerly on a CPU at a tiny size."""
    q, k, v = lesson.qkv(1, 2, 32, 8)
    ids = lesson.random_docs(1, 32, 3)
    with pytest.warns(UserWarning):  # eager FlexAttention says it is unfused
        out, _ = lesson.flex_attention_docs(q, k, v, ids)
    assert (out - lesson.reference_attention(q, k, v, ids)).abs().max() < 1e-5
    assert not lesson.flex_support(torch.device("cpu"))[0]


def test_the_colleagues_block_makes_two_graphs_and_explain_names_the_line():
    colleague, _ = lesson.block_pair(lesson.ColleagueBlock)
    g = lesson.graphs_of(colleague, lesson.block_input())
    assert (g.graphs, g.breaks) == (2, 1) and ".item()" in g.reasons[0]


def test_without_a_cxx_compiler_inductor_is_not_applicable_on_a_cpu(monkeypatch):
    monkeypatch.setattr(inductor.shutil, "which", lambda name: None)
    ok, why = lesson.can_compile(torch.device("cpu"))
    assert not ok and "C++ compiler" in why


def test_dynamo_alone_times_a_first_call_and_two_steady_steps():
    _, block = lesson.block_pair(lesson.ReferenceBlock)
    t = lesson.first_vs_steady(block, lesson.block_input(2, 16), backend="eager", repeats=2)
    assert t.first_s > 0 and t.eager_s > 0 and t.compiled_s > 0


# --- exercise 1: causal attention with SDPA ------------------------------------------------------


def float_mask(q, k, v, doc_ids=None):
    """Valid: an additive float mask (0 where allowed, -inf elsewhere), shared by the heads."""
    T = q.shape[-2]
    keep = torch.ones(T, T, dtype=torch.bool).tril()
    if doc_ids is not None:
        keep = keep & (doc_ids[:, None, :, None] == doc_ids[:, None, None, :])
    bias = torch.zeros(keep.shape, dtype=q.dtype).masked_fill(~keep, float("-inf"))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=bias)


def boundaries(q, k, v, doc_ids=None):
    """Valid: documents from where the id changes (cumsum), mask built with torch.where."""
    if doc_ids is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    starts = torch.ones_like(doc_ids)
    starts[:, 1:] = (doc_ids[:, 1:] != doc_ids[:, :-1]).long()
    seg = starts.cumsum(1)
    T = q.shape[-2]
    keep = (seg[:, :, None] == seg[:, None, :]) & torch.ones(T, T, dtype=torch.bool).tril()
    return F.scaled_dot_product_attention(q, k, v, attn_mask=keep[:, None])


def causal_only(q, k, v, doc_ids=None):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


def not_causal(q, k, v, doc_ids=None):
    mask = None if doc_ids is None else doc_ids[:, None, :, None] == doc_ids[:, None, None, :]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def both_flags(q, k, v, doc_ids=None):
    mask = None if doc_ids is None else doc_ids[:, None, :, None] == doc_ids[:, None, None, :]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=True)


def scale_one(q, k, v, doc_ids=None):
    return lesson.naive_attention(q * math.sqrt(q.shape[-1]), k, v, doc_ids)


def dropout_on(q, k, v, doc_ids=None):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=0.1)


def ones_and_zeros(q, k, v, doc_ids=None):
    keep = torch.ones(q.shape[-2], q.shape[-2]).tril()
    return F.scaled_dot_product_attention(q, k, v, attn_mask=keep)


def inverted(q, k, v, doc_ids=None):
    T = q.shape[-2]
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=torch.ones(T, T, dtype=torch.bool).triu(1)
    )


def per_head(q, k, v, doc_ids=None):
    if doc_ids is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    T, H = q.shape[-2], q.shape[1]
    keep = (doc_ids[:, None, :, None] == doc_ids[:, None, None, :]) & torch.ones(T, T).bool().tril()
    return F.scaled_dot_product_attention(
        q, k, v, attn_mask=keep.expand(-1, H, -1, -1).contiguous()
    )


def no_grad(q, k, v, doc_ids=None):
    with torch.no_grad():
        return float_mask(q, k, v, doc_ids)


def test_attention_check_passes_the_reference_and_measures_its_memory():
    result = lesson.check_attention(lesson.reference_attention)
    assert result.status == "passed"
    assert part(result, "memory with documents").value < 0.5


@pytest.mark.parametrize("fn", [float_mask, boundaries], ids=["float-mask", "boundaries"])
def test_attention_check_passes_valid_alternatives(fn):
    assert lesson.check_attention(fn).status == "passed"


@pytest.mark.parametrize(
    "fn, cause",
    [
        (causal_only, "attends across documents"),
        (not_causal, "not causal"),
        (scale_one, "scaled by 1 instead of 1/sqrt"),
        (dropout_on, "it is random"),
        (ones_and_zeros, "a float mask of 1s and 0s is added"),
        (inverted, "the mask is inverted"),
        (no_grad, "does not require grad"),
    ],
    ids=["causal-only", "not-causal", "scale-1", "dropout", "float-ones", "inverted", "no-grad"],
)
def test_attention_check_fails_wrong_answers_naming_the_cause(fn, cause):
    exc = failure(lesson.check_attention, fn)
    assert cause in exc.summary, exc.summary


def test_attention_check_fails_the_hand_written_attention_on_memory_only():
    exc = failure(lesson.check_attention, lesson.naive_attention)
    assert "same as naive_attention: outputs within" in exc.summary
    assert "on the scale of the T x T scores" in exc.summary


def test_attention_check_fails_a_mask_copied_for_every_head_on_memory_with_documents():
    exc = failure(lesson.check_attention, per_head)
    assert "memory with documents" in exc.summary and "measured 1.29" in exc.summary


def test_attention_check_reports_sdpas_refusal_of_both_flags_as_an_error():
    assert fails(lesson.check_attention, both_flags) == "error"


def test_attention_check_reports_not_attempted_and_rejects_delegation():
    assert fails(lesson.check_attention, not_attempted) == "not-attempted"

    def delegating(q, k, v, doc_ids=None):
        return lesson.reference_attention(q, k, v, doc_ids)

    assert "reference answer" in failure(lesson.check_attention, delegating).summary


# --- exercise 2: pad, bucket or pack ---------------------------------------------------------------


def bucketing(docs, rows, row_len):
    """Valid: sorted by length, each batch padded to its longest (similar lengths)."""
    ordered = sorted(docs, key=len)
    return [lesson.padded(ordered[i : i + rows]) for i in range(0, len(ordered), rows)]


def positions_none(docs, rows, row_len):
    return [dataclasses.replace(b, positions=None) for b in REF_BATCHES(docs, rows, row_len)]


def positions_of_the_row(docs, rows, row_len):
    out = REF_BATCHES(docs, rows, row_len)
    return [
        dataclasses.replace(b, positions=torch.arange(row_len).expand_as(b.tokens)) for b in out
    ]


def doc_ids_none(docs, rows, row_len):
    return [dataclasses.replace(b, doc_ids=None) for b in REF_BATCHES(docs, rows, row_len)]


def targets_across(docs, rows, row_len):
    out = []
    for b in REF_BATCHES(docs, rows, row_len):
        t, following = b.targets.clone(), torch.roll(b.tokens, -1, 1)
        real = (b.doc_ids >= 0) & (torch.roll(b.doc_ids, -1, 1) >= 0)
        t[:, :-1] = torch.where(real[:, :-1], following[:, :-1], t[:, :-1])
        out.append(dataclasses.replace(b, targets=t))
    return out


def one_doc_id(docs, rows, row_len):
    """Packed, but every token of a row, padding included, shares doc_id 0."""
    out = REF_BATCHES(docs, rows, row_len)
    return [dataclasses.replace(b, doc_ids=torch.zeros_like(b.doc_ids)) for b in out]


def drop_last(docs, rows, row_len):
    return REF_BATCHES(docs, rows, row_len)[:-1]


def too_many_rows(docs, rows, row_len):
    return REF_BATCHES(docs, 4 * rows, row_len)


def concatenate_and_cut(docs, rows, row_len):
    stream = torch.cat(docs)
    n = len(stream) // (row_len + 1)
    chunks = stream[: n * (row_len + 1)].view(n, row_len + 1)
    return [lesson.Batch(c[:, :-1].contiguous(), c[:, 1:].contiguous()) for c in chunks.split(rows)]


def eight_rows_always(docs, rows, row_len):
    """The check's 8 rows typed in: right only when the check asks for 8."""
    return REF_BATCHES(docs, 8, row_len)


def shifted_pairs(docs, rows, row_len):
    """Valid: nanoGPT's pairs (tokens d[:-1], targets d[1:]: no slot holds a last token that
    predicts nothing), packed in the order given, a row closed when the next does not fit."""
    packed, used = [[]], 0
    for d in docs:
        if used + len(d) - 1 > row_len:
            packed, used = [*packed, []], 0
        packed[-1].append(d)
        used += len(d) - 1
    batches = []
    for start in range(0, len(packed), rows):
        chunk = packed[start : start + rows]
        tokens, targets, positions, doc_ids = (
            torch.full((len(chunk), row_len), v) for v in (0, text.IGNORE, 0, -1)
        )
        for r, row in enumerate(chunk):
            col = 0
            for i, d in enumerate(row):
                n = len(d) - 1
                tokens[r, col : col + n], targets[r, col : col + n] = d[:-1], d[1:]
                positions[r, col : col + n], doc_ids[r, col : col + n] = torch.arange(n), i
                col += n
        batches.append(lesson.Batch(tokens, targets, positions, doc_ids))
    return batches


def test_packing_check_passes_the_reference_and_times_it():
    result = lesson.check_packing(lesson.reference_make_batches)
    assert result.status == "passed"
    assert part(result, "speed").value >= lesson.PACK_THRESHOLDS["speedup"].value


def test_packing_check_fails_padding_on_speed_alone():
    exc = failure(lesson.check_packing, lesson.pad_batches)
    assert "same loss: summed loss" in exc.summary and "below the 1.5x expected" in exc.summary


@pytest.mark.parametrize(
    "fn, name, cause",
    [
        (positions_none, "positions", "positions is None"),
        (positions_of_the_row, "positions", "do not count 0, 1, 2"),
        (doc_ids_none, "attention stays", "with doc_ids None: it attends"),
        (one_doc_id, "attention stays", "shares its doc_id with tokens before it"),
        (targets_across, "every document", "a target crosses from one document into the next"),
        (drop_last, "every document", "never reach the model whole"),
        (too_many_rows, "batch size", "allowed 8 rows of 256"),
        (concatenate_and_cut, "every document", "48 of 48 documents never reach the model"),
        (eight_rows_always, "batch size", "called with rows=3, row_len=128: at most 8 rows"),
    ],
    ids=[
        "positions-none",
        "positions-of-the-row",
        "doc-ids-none",
        "one-doc-id",
        "targets-across",
        "drop-last",
        "too-many-rows",
        "concatenate-and-cut",
        "eight-rows-always",
    ],
)
def test_packing_check_fails_wrong_batches_on_the_part_that_names_the_cause(fn, name, cause):
    result = failure(lesson.check_packing, fn)
    assert f"{name}" in result.summary and cause in result.summary, result.summary
    assert "speed: real tokens" not in result.summary  # never timed


def _diagnosed(batches, docs) -> dict[str, list[str]]:
    return {k: v for k, v in layout.diagnose(layout.read_layout(batches), docs).items() if v}


def test_the_layout_reader_finds_every_document_of_a_valid_packing_and_bucketing():
    docs = packing.check_docs()
    for fn in (REF_BATCHES, bucketing, shifted_pairs):
        assert not _diagnosed(fn(docs, 8, 256), docs)


def test_a_last_target_equal_to_the_next_token_crosses_only_when_the_documents_say_so():
    """One row, read against two sets of documents: nanoGPT's pair of [1, 2, 3] beside
    [3, 4], or [1, 2] whose last token predicts the next document's first byte."""
    rows = ([1, 2, 3, 4], [2, 3, 4, text.IGNORE], [0, 1, 0, 1], [0, 0, 1, 1])
    batches = [lesson.Batch(*(torch.tensor([r]) for r in rows))]
    pairs = [torch.tensor(d) for d in ([1, 2, 3], [3, 4])]
    crossing = [torch.tensor(d) for d in ([1, 2], [3, 4])]
    assert not _diagnosed(batches, pairs)
    assert _diagnosed(batches, crossing) == {
        "targets": [
            "batch 0, row 0: a target crosses from one document into the next (a document's "
            "last token must have no target)"
        ]
    }


def test_targets_chained_through_documents_are_read_as_documents_that_cross():
    """Targets shifted along the row as one text, no doc_ids and no positions: the row is one
    chain, read as the documents it holds, each crossing into the next; what each sees is
    then confirmed (its positions and attention), and nothing is missing."""
    docs = [torch.tensor(d) for d in ([1, 2, 3], [4, 5], [6, 7, 8])]
    tokens = torch.tensor([[1, 2, 3, 4, 5, 6, 7, 8]])
    targets = torch.tensor([[2, 3, 4, 5, 6, 7, 8, text.IGNORE]])
    said = _diagnosed([lesson.Batch(tokens, targets)], docs)
    assert said["targets"] == [f"batch 0, row 0: {layout.CROSSES}"] * 2
    for kind in ("positions", "doc_ids"):  # the 2nd and 3rd start at columns 3 and 5
        assert [f"column {c} " in m for m, c in zip(said[kind], (3, 5), strict=True)] == [True] * 2


def test_what_a_piece_sees_is_reported_only_where_the_piece_is_a_whole_document():
    """A document cut across two rows, positions running on into the second: the second part
    is no document, so its positions are not blamed; what is missing and extra is."""
    doc = torch.arange(10, 20)
    tokens = torch.tensor([[30, 31, 10, 11, 12], [13, 14, 15, 16, 17]])
    targets = torch.tensor([[31, -100, 11, 12, 13], [14, 15, 16, 17, 18]])
    positions = torch.tensor([[0, 1, 0, 1, 2], [3, 4, 5, 6, 7]])
    ids = torch.tensor([[0, 0, 1, 1, 1], [0, 0, 0, 0, 0]])
    said = _diagnosed(
        [lesson.Batch(tokens, targets, positions, ids)], [torch.tensor([30, 31]), doc]
    )
    assert set(said) == {"targets"}, said
    assert any("never reach the model whole" in m for m in said["targets"])


@pytest.mark.parametrize(
    "change, kind, cause",
    [
        (lambda b: replace(b, tokens=b.tokens.int()), "targets", "tokens is torch.int32"),
        (lambda b: replace(b, positions=b.positions[0]), "targets", "positions has shape (256,)"),
        (
            lambda b: replace(b, positions=b.positions.masked_fill(b.doc_ids < 0, -1)),
            "positions",
            "positions holds -1, outside 0-255: the model's position table has 256 entries "
            "(padding needs one too",
        ),
        (
            lambda b: replace(b, tokens=b.tokens.masked_fill(b.doc_ids < 0, 256)),
            "targets",
            "tokens holds 256, outside 0-255: the model's vocabulary of bytes has 256 entries "
            "(padding needs one too",
        ),
        (lambda b: replace(b, positions=b.positions + 1), "positions", "holds 256, outside 0-255"),
    ],
    ids=["int32", "positions-one-row", "padding-at-minus-one", "pad-token-256", "positions-from-1"],
)
def test_a_batch_the_model_cannot_read_is_named_by_its_field(change, kind, cause):
    docs = packing.check_docs()
    said = _diagnosed([change(b) for b in REF_BATCHES(docs, 8, 256)], docs)
    assert cause in said[kind][0], said
    if "outside" in cause and "padding" not in cause:  # a document's own position
        assert "padding" not in said[kind][0]


def test_the_probe_model_tells_a_packing_without_positions_from_the_truth():
    docs, model = packing.check_docs(), packing.probe_model()
    want, _ = packing.alone_loss(model, docs)
    right, _ = packing.loss_of(model, REF_BATCHES(docs, 8, 256))
    wrong, _ = packing.loss_of(model, positions_none(docs, 8, 256))
    tol = lesson.PACK_THRESHOLDS["loss_rtol"].value
    assert abs(right - want) / want < tol < abs(wrong - want) / want / 10


def test_packing_check_reports_not_attempted_and_does_not_time_where_timing_is_not_graded(
    monkeypatch,
):
    assert fails(lesson.check_packing, not_attempted) == "not-attempted"
    monkeypatch.setenv("COURSE_PLATFORM", "gradescope")
    monkeypatch.setattr(packing, "epoch", lambda model, batches: lambda: None)
    result = lesson.check_packing(bucketing)
    assert part(result, "speed").status == "not-applicable"


# --- exercise 3: the graph break -----------------------------------------------------------------


class NoGradStat(lesson.ColleagueBlock):
    """Valid: the statistic computed under no_grad, kept as a tensor."""

    def forward(self, x, doc_ids=None):
        h = self.attn(self.ln1(x), doc_ids)
        x = x + h
        with torch.no_grad():
            self.last_rms = h.pow(2).mean().sqrt()
        return x + self.mlp(self.ln2(x))


class Deleted(lesson.ColleagueBlock):
    def forward(self, x, doc_ids=None):
        x = x + self.attn(self.ln1(x), doc_ids)
        return x + self.mlp(self.ln2(x))


class Attached(lesson.ColleagueBlock):
    def forward(self, x, doc_ids=None):
        h = self.attn(self.ln1(x), doc_ids)
        x = x + h
        self.last_rms = h.pow(2).mean().sqrt()
        return x + self.mlp(self.ln2(x))


class FloatOfIt(lesson.ColleagueBlock):
    def forward(self, x, doc_ids=None):
        h = self.attn(self.ln1(x), doc_ids)
        x = x + h
        self.last_rms = float(h.detach().pow(2).mean().sqrt())
        return x + self.mlp(self.ln2(x))


class Disabled(lesson.ColleagueBlock):
    @torch.compiler.disable
    def forward(self, x, doc_ids=None):
        return super().forward(x, doc_ids)


class Scaled(lesson.ColleagueBlock):
    """One graph, but the residual scaled: the output changes."""

    def forward(self, x, doc_ids=None):
        h = self.attn(self.ln1(x), doc_ids)
        x = x + 0.5 * h
        self.last_rms = h.detach().pow(2).mean().sqrt()
        return x + self.mlp(self.ln2(x))


class DocIdsDropped(lesson.ColleagueBlock):
    """One graph, same output without documents; doc_ids never reach the attention."""

    def forward(self, x, doc_ids=None):
        h = self.attn(self.ln1(x))
        x = x + h
        self.last_rms = h.detach().pow(2).mean().sqrt()
        return x + self.mlp(self.ln2(x))


class AttentionDetached(lesson.ColleagueBlock):
    """Same output and statistic, but attention and ln1 get no gradient."""

    def forward(self, x, doc_ids=None):
        h = self.attn(self.ln1(x), doc_ids).detach()
        x = x + h
        self.last_rms = h.pow(2).mean().sqrt()
        return x + self.mlp(self.ln2(x))


class EagerOnlyStat(lesson.ColleagueBlock):
    """One graph, because the statistic is recorded only outside compilation."""

    def forward(self, x, doc_ids=None):
        h = self.attn(self.ln1(x), doc_ids)
        x = x + h
        if not torch.compiler.is_compiling():
            self.last_rms = h.pow(2).mean().sqrt().item()
        return x + self.mlp(self.ln2(x))


class FirstCallOnly(lesson.ColleagueBlock):
    """A tensor statistic recorded on the first call only: every later call, eager or
    compiled, leaves the first one's value (the compiled forward is not the cause)."""

    def forward(self, x, doc_ids=None):
        h = self.attn(self.ln1(x), doc_ids)
        x = x + h
        if not hasattr(self, "last_rms"):
            self.last_rms = h.detach().pow(2).mean().sqrt()
        return x + self.mlp(self.ln2(x))


class PerRow(lesson.ColleagueBlock):
    """The RMS of each batch row: a tensor of B values, not the one number float() reads."""

    def forward(self, x, doc_ids=None):
        h = self.attn(self.ln1(x), doc_ids)
        x = x + h
        self.last_rms = h.detach().pow(2).mean((1, 2)).sqrt()
        return x + self.mlp(self.ln2(x))


def test_graph_break_check_passes_the_reference_and_a_no_grad_statistic():
    assert lesson.check_graph_break(lesson.ReferenceBlock).status == "passed"
    assert lesson.check_graph_break(NoGradStat).status == "passed"


@pytest.mark.parametrize(
    "cls, cause",
    [
        (lesson.ColleagueBlock, "first break at compiling.py"),
        (FloatOfIt, "Tensor.item()"),
        (Deleted, "the block records no last_rms"),
        (Attached, "keeps this step's whole autograd graph"),
        (Disabled, "TorchDynamo captured no operation of the forward"),
        (Scaled, "same output: max |yours - colleague's|, same weights: measured"),
        (DocIdsDropped, "with doc_ids (4 documents per row) yours is the output without"),
        (AttentionDetached, "no gradient reaches ln1.weight, ln1.bias, attn.qkv.weight"),
        (EagerOnlyStat, "the previous call's value (the colleague's is now"),
        (FirstCallOnly, "still holds the first call's"),
        (PerRow, "last_rms is a tensor of shape (2,)"),
    ],
    ids=[
        "unchanged",
        "float",
        "deleted",
        "attached",
        "disabled",
        "output-changed",
        "doc-ids-dropped",
        "attention-detached",
        "eager-only-statistic",
        "first-call-only",
        "per-row",
    ],
)
def test_graph_break_check_fails_wrong_blocks_naming_the_cause(cls, cause):
    exc = failure(lesson.check_graph_break, cls)
    assert cause in exc.summary, exc.summary


def test_graph_break_check_counts_graphs_with_dynamos_defaults():
    import torch._dynamo

    # config.patch, not monkeypatch: pytest undoes a setattr on a module with delattr,
    # which hides a dynamo config entry for the rest of the session.
    with torch._dynamo.config.patch(capture_scalar_outputs=True):
        assert "1 break(s)" in failure(lesson.check_graph_break, lesson.ColleagueBlock).summary


def test_graph_break_check_reports_not_attempted():
    class Stub(lesson.ColleagueBlock):
        def forward(self, x, doc_ids=None):
            raise NotImplementedError()

    assert fails(lesson.check_graph_break, Stub) == "not-attempted"


def test_every_threshold_carries_its_evidence_and_where_it_was_measured():
    for table in (lesson.THRESHOLDS, lesson.PACK_THRESHOLDS):
        for t in table.values():
            assert len(t.evidence) > 40 and "cpu-bf16" in t.measured_on


def test_the_check_scenario_is_a_skewed_mix_with_most_of_its_padded_slots_wasted():
    docs = packing.check_docs()
    assert len(docs) == packing.N_DOCS
    assert 0.5 < text.waste(text.pad_batches(docs, 8, 256)).padding < 0.75


# --- judged as `course grade` judges: the check body here, the learner's side in a child ------

JUDGED_REFERENCES = [
    ("12-sdpa-attention", "course_utils.lessons.transformers.reference:reference_attention"),
    ("12-packing", "course_utils.lessons.transformers.reference:reference_make_batches"),
    ("12-graph-break", "course_utils.lessons.transformers.reference:ReferenceBlock"),
]
# a wrong answer of the blind red team per check, its verdict in a notebook and in the judge
JUDGED_WRONG = [
    ("12-sdpa-attention", "check_attention", "wrong_mask_per_head"),  # memory, in the kernel
    ("12-packing", "check_packing", "wrong_positions_none"),
    ("12-graph-break", "check_graph_break", "wrong_float_instead_of_item"),
]


@pytest.fixture
def redteam_importable(monkeypatch):
    """The red team's module, importable here and in the judged child (tests/ and
    tests/redteam/ on its path)."""
    import os
    from pathlib import Path

    here = Path(__file__).parent
    paths = [str(here), str(here / "redteam")]
    for path in paths:
        monkeypatch.syspath_prepend(path)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([*paths, os.environ.get("PYTHONPATH", "")]))
    import test_12_blind

    return test_12_blind


@pytest.mark.parametrize(
    "check_id, answer", JUDGED_REFERENCES, ids=[c for c, _ in JUDGED_REFERENCES]
)
def test_the_reference_passes_when_judged_outside_the_learners_process(check_id, answer):
    from judge_helpers import remote_verdict

    verdict = remote_verdict(check_id, answer)
    assert verdict["status"] == "passed", verdict["message"]


@pytest.mark.parametrize(
    "check_id, check, answer", JUDGED_WRONG, ids=[c for c, _, _ in JUDGED_WRONG]
)
def test_a_wrong_answer_gets_the_same_verdict_judged_as_in_a_notebook(
    redteam_importable, check_id, check, answer
):
    from check_helpers import status_of
    from judge_helpers import remote_verdict

    here = status_of(getattr(lesson, check), getattr(redteam_importable, answer))
    verdict = remote_verdict(check_id, f"test_12_blind:{answer}")
    assert here == verdict["status"] == "failed", verdict["message"]


class BufferStat(lesson.ColleagueBlock):
    """Valid: the statistic in a non-persistent 0-d buffer, written in place by each call."""

    def __init__(self, cfg, attention=None):
        super().__init__(cfg, attention)
        self.register_buffer("last_rms", torch.zeros(()), persistent=False)

    def forward(self, x, doc_ids=None):
        h = self.attn(self.ln1(x), doc_ids)
        x = x + h
        self.last_rms.copy_(h.detach().pow(2).mean().sqrt())
        return x + self.mlp(self.ln2(x))


def test_the_graph_break_probe_reads_a_statistic_written_in_place_as_it_is_after_each_call():
    """The probe returns every reading at its end: a buffer the next call overwrites must be
    read (copied) when the reading is taken, not when the readings are sent."""
    assert lesson.check_graph_break(BufferStat).status == "passed"
