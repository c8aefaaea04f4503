"""Lesson 17's checks pass the reference kernels and the valid alternatives, and fail the
colleague's kernels and the half-understood fixes, naming a cause only where the learner's output
is exactly that mistake's replay.

Kernels run on the CPU through Triton's interpreter (runtime.prepare sets TRITON_INTERPRET=1
before this module defines any): each check of a kernel takes about a second here. The
notebook's own cells are graded (check_helpers.cells_of), not copies of them that could drift.
"""

from __future__ import annotations

import math
import os

import pytest
import torch
from check_helpers import cells_of, failure, not_attempted, status_of

from course_utils.lessons.kernels.runtime import TritonMissing, prepare

prepare()  # before any kernel below is defined: Triton reads TRITON_INTERPRET at @triton.jit

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from course_utils.errors import ReferenceWithheld  # noqa: E402
from course_utils.lessons import kernels as lesson  # noqa: E402
from course_utils.lessons.kernels import attention, runtime, traffic  # noqa: E402
from course_utils.lessons.kernels.specimens import FLASH_CASES  # noqa: E402
from course_utils.lessons.kernels.traffic_check import SHAPES  # noqa: E402
from course_utils.probes import Local  # noqa: E402

ALL = os.environ.get("COURSE_TESTS") == "all"
NOTEBOOK = "17_triton_kernels"
CELLS = (
    "17-colleague-softmax",
    "17-softmax-fix",
    "17-colleague-flash",
    "17-colleague-flash-launch",
    "17-flash-fix",
    "17-flash-launch",
)
SHOWN = cells_of(NOTEBOOK, *CELLS, "17-traffic-answer", torch=torch, triton=triton, tl=tl)
PREDICT = lesson.reference_predict_traffic.__wrapped__


def variant(cell_ids: tuple[str, ...], name: str, *changes: tuple[str, str]):
    """The notebook's cells `cell_ids` with each (old, new) replaced where it occurs (each old
    must occur), run in order; the function `name` they define: a learner's edit of the
    colleague's or the fixed kernel."""
    import json
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "solutions" / f"{NOTEBOOK}.ipynb"
    cells = {c["id"]: "".join(c["source"]) for c in json.loads(path.read_text())["cells"]}
    sources = [cells[cell_id] for cell_id in cell_ids]
    for old, new in changes:
        assert any(old in source for source in sources), old
        sources = [source.replace(old, new) for source in sources]
    namespace = {"torch": torch, "triton": triton, "tl": tl, "math": math}
    for cell_id, source in zip(cell_ids, sources, strict=True):
        exec(compile(source, f"{NOTEBOOK}:{cell_id}:{name}", "exec"), namespace)
    return namespace[name]


def failed_parts(check, answer) -> dict[str, str]:
    """part name -> message of each failed part of the check's body on `answer`."""
    return {p.name: p.message for p in check.__wrapped__(Local(answer)) if p.status == "failed"}


# --- the lesson's pieces -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "B, H, T, D, dtype",
    [(1, 2, 8, 4, "float32"), (2, 3, 100, 16, "float16"), (1, 8, 1024, 64, "bfloat16")],
)
def test_the_checks_naive_count_is_what_the_operators_move(B, H, T, D, dtype):
    counted = attention.moved_bytes(attention.naive_attention, B, H, T, D, dtype).total
    assert traffic.naive_bytes(traffic.Shape(B, H, T, D, dtype)) == counted


def _loads(shape: traffic.Shape) -> int:
    """Rows of K the flash kernel's loop loads for one (batch, head), program by program and
    tile by tile, as its masks allow."""
    rows = 0
    for program in range(math.ceil(shape.T / shape.block_m)):
        start_m = program * shape.block_m
        for start_n in range(0, start_m + shape.block_m, shape.block_n):
            rows += sum(1 for n in range(start_n, start_n + shape.block_n) if n < shape.T)
    return rows


@pytest.mark.parametrize("shape", [s for options in SHAPES.values() for s in options], ids=str)
def test_the_checks_fused_count_follows_the_kernels_loop_and_the_reference_agrees(shape):
    assert traffic.keys_loaded(shape) == _loads(shape)
    assert PREDICT(shape) == {
        "naive": traffic.naive_bytes(shape),
        "fused": traffic.fused_bytes(shape),
    }


def test_the_naive_attention_equals_sdpa_and_its_scores_grow_as_t_squared():
    q, k, v = lesson.qkv(1, 2, 64, 16)
    assert (lesson.naive_attention(q, k, v) - lesson.sdpa(q, k, v)).abs().max() < 1e-5
    _, table = lesson.memory_table((128, 256))
    assert table[256][0] > 3 * table[128][0]  # two score matrices held, each T x T
    assert table[256][1] < table[256][0] / 4


def test_online_softmax_ends_at_the_log_sum_exp():
    row = torch.tensor([1.0, 3.0, 2.0, 0.0, 5.0, 4.0, 9.0, 1.0])
    last = lesson.online_softmax_trace(row, block=3)[-1]
    assert last["max"] + math.log(last["sum"]) == pytest.approx(torch.logsumexp(row, 0).item())


def test_on_a_cpu_kernels_run_in_the_interpreter():
    assert runtime.interpreted() and lesson.kernel_device().type == "cpu"


def test_without_triton_a_kernel_cell_stops_in_one_line_and_the_checks_do_not_apply(monkeypatch):
    monkeypatch.setattr(runtime, "have_triton", lambda: False)
    fake_triton, fake_tl = runtime.load_triton()

    @fake_triton.jit
    def kernel(X, BLOCK: fake_tl.constexpr):  # a cell's definition runs
        pass

    with pytest.raises(TritonMissing) as info:
        kernel[(1,)](torch.zeros(1), BLOCK=4)
    assert isinstance(info.value, ReferenceWithheld)  # course_utils.skipping: one line
    assert "Colab" in str(info.value)
    monkeypatch.setattr("course_utils.lessons.kernels.checks.have_triton", lambda: False)
    assert lesson.check_fused_softmax(not_attempted).status == "not-applicable"


def test_triton_imported_before_the_interpreter_was_chosen_is_told_how_to_recover(monkeypatch):
    """tl.max and tl.sum are jitted when triton.language is imported: a kernel cell after that
    cannot run in the interpreter, and says to restart rather than fail inside Triton."""
    monkeypatch.setattr(runtime, "_library_interpreted", lambda: False)
    fake_triton, _ = runtime.load_triton()
    with pytest.raises(TritonMissing, match="restart the kernel"):
        fake_triton.jit(lambda X: None)[(1,)](torch.zeros(1))


def test_kernels_run_where_torch_imported_triton_before_the_lesson():
    """torch._dynamo imports Triton whenever it is installed, so in a test session (or a
    notebook run out of order) tl.max and tl.sum were jitted for the GPU: importing the lesson
    rebuilds them for the interpreter (runtime.prepare)."""
    import subprocess
    import sys

    script = (
        "import sys, torch._dynamo\n"
        "assert 'triton.language' in sys.modules\n"
        "from course_utils.lessons import kernels as lesson\n"
        "print(lesson.check_fused_softmax(lesson.reference_softmax.__wrapped__).status)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.stdout.strip().endswith("passed"), done.stdout + done.stderr


class _Pick:
    """A specimen_rng stand-in that draws the i-th option of every choice (the last where
    there are fewer): each option the judge may draw, in turn."""

    def __init__(self, i: int):
        self.i = i

    def choice(self, options):
        return options[min(self.i, len(options) - 1)]


@pytest.mark.parametrize("i", [1, 2])
def test_on_every_draw_the_references_pass_and_the_colleagues_fail_named(i, monkeypatch):
    for module in ("checks", "traffic_check"):
        monkeypatch.setattr(f"course_utils.lessons.kernels.{module}.specimen_rng", lambda: _Pick(i))
    assert lesson.check_fused_softmax(lesson.reference_softmax.__wrapped__).status == "passed"
    assert lesson.check_flash_forward(lesson.reference_attention.__wrapped__).status == "passed"
    assert lesson.check_predict_traffic(PREDICT).status == "passed"
    softmax = failed_parts(lesson.check_fused_softmax, SHOWN["colleagues_softmax"])
    flash = failed_parts(lesson.check_flash_forward, SHOWN["colleagues_attention"])
    assert len(softmax) >= 2 and all("padded lanes" in m for m in softmax.values()), softmax
    assert len(flash) == len(FLASH_CASES) - 1, flash  # all but "the max in the first keys"
    assert all("accumulator is not" in m for m in flash.values()), flash


# --- exercise 1: the colleague's softmax ------------------------------------------------------


def test_softmax_passes_the_reference_and_says_not_attempted_for_the_stub():
    assert lesson.check_fused_softmax(lesson.reference_softmax.__wrapped__).status == "passed"
    assert lesson.check_fused_softmax(SHOWN["softmax"]).status == "passed"
    assert failure(lesson.check_fused_softmax, not_attempted).status == "not-attempted"


def test_the_colleagues_softmax_fails_naming_the_padded_lanes_where_a_power_of_two_passes():
    failed = failed_parts(lesson.check_fused_softmax, SHOWN["colleagues_softmax"])
    assert "rows of 64 (a power of two)" not in failed
    assert {"rows of 100", "rows of 781, all entries negative"} <= set(failed)
    for said in failed.values():
        assert (
            "the padded lanes take part" in said and "rows of a power-of-two length passed" in said
        )


FIX = ("17-softmax-fix",)
UNSHIFTED = ("num = tl.exp(x - tl.max(x, axis=0))", "num = tl.exp(x)")
STRIDE = ("x.stride(0), y.stride(0)", "n_cols, n_cols")


@pytest.mark.parametrize(
    "changes, failing, said",
    [
        (
            (UNSHIFTED,),
            {
                "entries up to 400 (exp overflows without the max)",
                "rows of 37, every entry near -300",
            },
            "without the row's max",
        ),
        (  # the padded lanes loaded as 0.0 and zeroed after the exp: a 0 in the max underflows
            (
                ('other=-float("inf"))', "other=0.0)"),
                (
                    "num = tl.exp(x - tl.max(x, axis=0))",
                    "num = tl.where(inside, tl.exp(x - tl.max(x, axis=0)), 0.0)",
                ),
            ),
            {"rows of 37, every entry near -300"},
            "a padded 0 taken as the max",
        ),
        ((STRIDE,), {"a slice of a wider tensor (row stride > length)"}, "x.stride(0)"),
    ],
    ids=["max-not-subtracted", "zero-padded-max", "row-stride-taken-as-length"],
)
@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")
@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")
def test_softmax_fails_a_half_fix_in_the_case_that_shows_it(changes, failing, said):
    wrong = variant(FIX, "softmax", *changes)
    failed = failed_parts(lesson.check_fused_softmax, wrong)
    assert set(failed) == failing, failed
    assert all(said in message for message in failed.values()), failed


def test_softmax_with_block_equal_to_the_row_length_is_an_error_on_odd_rows():
    """A 'fix' that drops the padding: tl.arange refuses a length that is not a power of two."""
    wrong = variant(FIX, "softmax", ("block = triton.next_power_of_2(n_cols)", "block = n_cols"))
    assert status_of(lesson.check_fused_softmax, wrong) == "error"


@pytest.mark.parametrize(
    "changes",
    [
        (("block = triton.next_power_of_2(n_cols)", "block = 2 * triton.next_power_of_2(n_cols)"),),
        (  # the padded lanes loaded as 0.0, left out of the max and zeroed after the exp
            ('other=-float("inf"))', "other=0.0)"),
            ("num = tl.exp(x - tl.max(x, axis=0))",
             'num = tl.where(inside, tl.exp(x - tl.max(tl.where(inside, x, -float("inf")), axis=0)), 0.0)'),
        ),
    ],
    ids=["block-twice-the-row", "exp-zeroed-past-the-end"],
)  # fmt: skip
def test_softmax_passes_valid_alternatives(changes):
    assert lesson.check_fused_softmax(variant(FIX, "softmax", *changes)).status == "passed"


# --- exercise 2: the colleague's flash forward ---------------------------------------------------


def test_flash_passes_the_reference_and_says_not_attempted_for_the_stub():
    assert lesson.check_flash_forward(lesson.reference_attention.__wrapped__).status == "passed"
    assert lesson.check_flash_forward(SHOWN["attention"]).status == "passed"
    assert failure(lesson.check_flash_forward, not_attempted).status == "not-attempted"


def test_the_colleagues_flash_fails_naming_the_accumulator_and_passes_the_max_in_first_keys():
    failed = failed_parts(lesson.check_flash_forward, SHOWN["colleagues_attention"])
    assert set(failed) == set(FLASH_CASES) - {"the max in the first keys"}, failed
    for said in failed.values():
        assert "the accumulator is not rescaled" in said, said
        assert "first keys" in said


FLASH = ("17-flash-fix", "17-flash-launch")
SUM_ONLY = ("l_i = l_i * alpha + tl.sum(p, axis=1)", "l_i = l_i + tl.sum(p, axis=1)")
NEITHER = (SUM_ONLY, ("acc = acc * alpha[:, None] + tl.dot(p, v)", "acc = acc + tl.dot(p, v)"))
INVERTED = ("alpha = tl.exp(m_i - m_new)", "alpha = tl.exp(m_new - m_i)")
LATE = (
    "        m_new = tl.maximum(m_i, tl.max(s, axis=1))\n",  # m_i moved before alpha: 1
    "        m_new = tl.maximum(m_i, tl.max(s, axis=1))\n        m_i = m_new\n",
)
NOT_CAUSAL = ('s = tl.where(rows[:, None] >= cols[None, :], s, -float("inf"))',
              's = tl.where(cols[None, :] < T, s, -float("inf"))')  # fmt: skip


@pytest.mark.parametrize(
    "changes, cause",
    [
        ((SUM_ONLY,), "the running sum is not rescaled"),
        (NEITHER, "neither the accumulator nor the running sum"),
        ((LATE,), "neither the accumulator nor the running sum"),
        ((INVERTED,), None),
        ((NOT_CAUSAL,), "no causal mask"),
    ],
    ids=["sum-not-rescaled", "neither-rescaled", "alpha-after-the-max-moved", "alpha-inverted",
         "not-causal"],
)  # fmt: skip
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # inf * 0 in a wrong kernel
def test_flash_fails_a_half_fix_naming_the_mistake_only_where_its_replay_matches(changes, cause):
    if not ALL and cause is None:
        pytest.skip("COURSE_TESTS=all: one more interpreted check")
    wrong = variant(FLASH, "attention", *changes)
    failed = failed_parts(lesson.check_flash_forward, wrong)
    assert "the max growing along the keys" in failed, failed
    for said in failed.values():
        if cause is None:
            assert (
                "exactly what this mistake gives" not in said
                and "matches none of the mistakes" in said
            )
        else:
            assert cause in said, said


@pytest.mark.parametrize(
    "changes",
    [
        (("triton.cdiv(T, 32)", "triton.cdiv(T, 16)"), ("BLOCK_M=32, BLOCK_N=32", "BLOCK_M=16, BLOCK_N=64")),
        (  # exp2 with log2(e) folded into the scale, as Triton's tutorial does
            ("s = tl.dot(q, tl.trans(k)) * scale", "s = tl.dot(q, tl.trans(k)) * (scale * 1.4426950408889634)"),
            ("alpha = tl.exp(m_i - m_new)", "alpha = tl.exp2(m_i - m_new)"),
            ("p = tl.exp(s - m_new[:, None])", "p = tl.exp2(s - m_new[:, None])"),
        ),
    ],
    ids=["tiles-16-by-64", "exp2"],
)  # fmt: skip
def test_flash_passes_valid_alternatives(changes):
    assert lesson.check_flash_forward(variant(FLASH, "attention", *changes)).status == "passed"


# --- exercise 3: predict the traffic -----------------------------------------------------------


def test_traffic_passes_the_reference_and_the_notebooks_answer_and_says_not_attempted():
    assert lesson.check_predict_traffic(PREDICT).status == "passed"
    assert lesson.check_predict_traffic(SHOWN["predict_traffic"]).status == "passed"
    assert failure(lesson.check_predict_traffic, not_attempted).status == "not-attempted"


def _tweaked(naive=None, fused=None):
    def predict(shape):
        right = PREDICT(shape)
        e, heads, T, D = shape.element_bytes, shape.B * shape.H, shape.T, shape.D
        return {
            "naive": naive(shape, right["naive"], e, heads, T, D) if naive else right["naive"],
            "fused": fused(shape, right["fused"], e, heads, T, D) if fused else right["fused"],
        }

    return predict


def _kv_once(s, right, e, heads, T, D):
    return 4 * heads * T * D * e


def _every_tile(s, right, e, heads, T, D):
    return heads * D * e * (2 * T + 2 * math.ceil(T / s.block_m) * T)


def _whole_tiles(s, right, e, heads, T, D):
    tiles = math.ceil(T / s.block_m)
    rows = sum(math.ceil((i + 1) * s.block_m / s.block_n) * s.block_n for i in range(tiles))
    return heads * D * e * (2 * T + 2 * rows)


@pytest.mark.parametrize(
    "answer, part, cause",
    [
        (_tweaked(naive=lambda s, r, e, h, T, D: 6 * h * T * T * 4 + 6 * h * T * D * e + T * T),
         "naive: tiles that divide T", "in float32 whatever"),
        (_tweaked(naive=lambda s, r, e, h, T, D: 3 * h * T * T * e + 6 * h * T * D * e + T * T),
         "naive: tiles that divide T", "causal mask taken to halve"),
        (_tweaked(naive=lambda s, r, e, h, T, D: r + (h - 1) * T * T),
         "naive: tiles that divide T", "once per batch and head"),
        (_tweaked(fused=_kv_once), "fused: tiles that divide T", "k and v read once"),
        (_tweaked(fused=_every_tile), "fused: tiles that divide T", "every key tile read by every"),
        (_tweaked(fused=_whole_tiles), "fused: T not a multiple of the tiles", "masked rows past T"),
    ],
    ids=["scores-in-float32", "causal-halves-the-scores", "mask-per-head", "kv-read-once",
         "causal-loop-end-ignored", "masked-rows-counted"],
)  # fmt: skip
def test_traffic_fails_a_half_understood_count_and_names_it(answer, part, cause):
    assert failure(lesson.check_predict_traffic, answer).status == "failed"
    failed = failed_parts(lesson.check_predict_traffic, answer)
    assert part in failed and cause in failed[part], failed


def test_traffic_off_by_one_element_fails_without_a_cause():
    answer = _tweaked(fused=lambda s, r, e, h, T, D: r + e)
    failed = failed_parts(lesson.check_predict_traffic, answer)
    assert all("Reread the code of the fused version" in m for m in failed.values()), failed


def test_traffic_passes_floats_and_numpy_integers():
    import numpy as np

    def alternative(shape):
        got = PREDICT(shape)
        return {"naive": float(got["naive"]), "fused": np.int64(got["fused"])}

    assert lesson.check_predict_traffic(alternative).status == "passed"


def test_traffic_that_returns_a_pair_is_told_the_shape_of_the_answer():
    exc = failure(lesson.check_predict_traffic, lambda shape: (1, 2))
    assert exc.status == "error" and '{"naive": bytes, "fused": bytes}' in exc.summary


def test_traffic_may_not_count_instead_of_predicting():
    def counts(shape):
        counted = lesson.moved_bytes(lesson.naive_attention, shape.B, shape.H, shape.T, shape.D)
        return {"naive": counted.total, "fused": 0}

    exc = failure(lesson.check_predict_traffic, counts)
    assert exc.status == "error" and "asks for a prediction" in exc.summary


# --- judged as `course grade` judges: the check body here, the learner's side in a child ------

colleagues_softmax = SHOWN["colleagues_softmax"]  # importable as test_lesson_17:<name>
colleagues_attention = SHOWN["colleagues_attention"]
wrong_kv_once = _tweaked(fused=_kv_once)

JUDGED = [
    ("17-fused-softmax", "course_utils.lessons.kernels.reference:reference_softmax", "passed"),
    ("17-fused-softmax", "test_lesson_17:colleagues_softmax", "failed"),
    ("17-flash-forward", "course_utils.lessons.kernels.reference:reference_attention", "passed"),
    ("17-flash-forward", "test_lesson_17:colleagues_attention", "failed"),
    ("17-predict-traffic", "course_utils.lessons.kernels.reference:reference_predict_traffic", "passed"),
    ("17-predict-traffic", "test_lesson_17:wrong_kv_once", "failed"),
]  # fmt: skip


@pytest.mark.parametrize("check_id, answer, status", JUDGED, ids=[f"{c}-{s}" for c, _, s in JUDGED])
def test_the_verdict_judged_outside_the_learners_process(check_id, answer, status):
    from pathlib import Path

    from judge_helpers import remote_verdict

    if status == "failed" and check_id != "17-predict-traffic" and not ALL:
        pytest.skip("COURSE_TESTS=all: one more judged child running kernels")
    verdict = remote_verdict(check_id, answer, paths=(Path(__file__).parent,))
    assert verdict["status"] == status, verdict["message"]
