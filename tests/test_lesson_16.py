"""Lesson 16's checks pass the reference answers and fail the mistakes a learner makes, with a
message naming the cause where the learner's numbers are exactly that mistake.

Exercise 1's check is deterministic (the real parallelize_module on pretend worlds, counted);
one launch of the notebook's measurements on 2 gloo processes (shared by the tests here) shows
the pretend world counts what real ranks send, and gives the headline figures. Exercise 2's is
arithmetic on scenario data. Exercise 3's launches 2 processes per file that passes its
pretend-world preflight: CI runs the reference and one mistake; COURSE_TESTS=all the rest.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from check_helpers import edition_attack, failure, not_attempted, status_of

from course_utils.authoring import learner_copy, read
from course_utils.lessons import parallel as lesson
from course_utils.lessons.parallel import jobs, layouts, shard_check, tensor_demo
from course_utils.lessons.parallel import probes as parallel_probes
from course_utils.lessons.parallel.pipeline import in_flight
from course_utils.lessons.parallel.reference_scripts import SHARD
from course_utils.probes import Local

ALL = os.environ.get("COURSE_TESTS") == "all"
NOTEBOOK = Path(__file__).resolve().parents[1] / "solutions" / "16_tensor_pipeline.ipynb"
PREDICT = lesson.reference_predict_comms.__wrapped__  # callable as a learner's answer
CHOOSE = lesson.reference_choose_parallel.__wrapped__


# --- the lesson's pieces -----------------------------------------------------------------------


def test_the_bubble_formula_and_the_micro_batches_in_flight():
    assert lesson.predicted_bubble(2, 4) == pytest.approx(1 / 5)
    assert lesson.predicted_bubble(4, 8) == pytest.approx(3 / 11)
    gpipe = [("F", 0, 0, 1), ("F", 1, 1, 2), ("B", 1, 2, 3), ("B", 0, 3, 4)]
    one = [("F", 0, 0, 1), ("B", 0, 1, 2), ("F", 1, 2, 3), ("B", 1, 3, 4)]
    assert in_flight(gpipe) == 2 and in_flight(one) == 1


def test_the_notebooks_shard_cell_is_the_reference_script():
    cell = next(c.source for c in read(NOTEBOOK).cells if c.source.startswith("%%writefile"))
    body = cell.split("\n", 1)[1].splitlines()
    kept = [line for line in body if line.strip() not in ("### BEGIN SOLUTION", "### END SOLUTION")]
    assert "\n".join(kept).strip() == SHARD.strip()


@pytest.fixture(scope="module")
def demo():
    """The notebook's launch (2 gloo processes), once for the tests that read it."""
    return lesson.run_demo()


def test_the_pretend_world_counts_what_two_real_processes_send(demo):
    """THRESHOLDS['bytes_atol'] evidence: the check's counts are those of real gloo ranks."""
    shape = tensor_demo.DEMO.to_dict()
    for name, style in (("parallelize_module", "megatron"), ("sequence parallel", "sequence")):
        layout = lesson.Layout(**{**shape, "style": style, "world": 2})
        counted = layouts.normalised(lesson.measured_comms(layout))
        for rank in demo.tensor:
            assert layouts.normalised(rank[name]["comms"]) == counted, (name, rank[name])
    by_hand = layouts.normalised(demo.tensor[0]["by hand"]["comms"])
    assert by_hand == layouts.normalised(demo.tensor[0]["parallelize_module"]["comms"])


def test_every_split_of_the_demo_equals_the_block_whole_and_holds_about_half(demo):
    for rank in demo.tensor:
        for name in ("by hand", "parallelize_module", "sequence parallel"):
            assert rank[name]["max_diff"] < 1e-5, (name, rank[name]["max_diff"])
            assert rank[name]["held_bytes"] < 0.6 * rank["whole_bytes"], name
    seq, tp = demo.tensor[0]["sequence parallel"], demo.tensor[0]["parallelize_module"]
    assert seq["saved_bytes"] < tp["saved_bytes"]  # the norm's activations split too


def test_1f1b_holds_fewer_micro_batches_and_fewer_bytes_than_gpipe(demo):
    """The headline: at the most micro-batches, GPipe's stages hold all m, 1F1B's p - rank."""
    m = max(r["micro_batches"] for r in demo.pipeline)
    gpipe, one = (demo.run(s, m)["ranks"] for s in ("GPipe", "1F1B"))
    assert [r["in_flight"] for r in gpipe] == [m, m]
    assert [r["in_flight"] for r in one] == [2, 1]
    for g, o, held in zip(gpipe, one, (2, 1), strict=True):
        assert g["peak_saved"] / o["peak_saved"] == pytest.approx(m / held, rel=0.1)
    for r in demo.pipeline:  # the idle share follows (p - 1) / (m + p - 1), a little above it
        predicted = lesson.predicted_bubble(2, r["micro_batches"])
        for rank in r["ranks"]:
            assert predicted - 0.05 < rank["idle"] < predicted + 0.25, (r["schedule"], rank)


# --- exercise 1: predict the collectives of a layout -------------------------------------------


class _Pick:
    """A specimen_rng stand-in that draws the i-th option of every choice (the last where
    there are fewer): each option the judge may draw, in turn."""

    def __init__(self, i: int):
        self.i = i

    def choice(self, options):
        return options[min(self.i, len(options) - 1)]


@pytest.mark.parametrize("i", [0, 1, 2])
def test_the_reference_prediction_is_exact_on_every_drawn_specimen(i):
    for name, layout in layouts.drawn(_Pick(i)).items():
        truth = layouts.normalised(lesson.measured_comms(layout))
        assert layouts.normalised(PREDICT(layout)) == truth, (name, layout)


def test_every_mistake_of_the_diagnosis_is_far_outside_the_slack():
    """THRESHOLDS['bytes_atol'] evidence: each variant misses its layout by a whole element or
    call. A cause that changes nothing for a layout (no all-gather to mis-size) is never
    named; causes that give the same numbers (a shard and a ring's share, on 2 ranks) are named
    together (test below)."""
    slack = lesson.THRESHOLDS["bytes_atol"].value
    for variants in layouts.CASES.values():
        for layout in variants:
            truth = layouts.normalised(lesson.measured_comms(layout))
            found = {c: v for c, v in layouts.variants(layout, truth).items() if v != truth}
            for cause, v in found.items():
                gaps = [abs(v[p][k][i] - truth[p][k][i]) for p in v for k in v[p] for i in (0, 1)]
                assert max(gaps) >= 1 > slack, (layout, cause)


def test_two_mistakes_with_the_same_numbers_are_both_named():
    def ring(layout):  # bytes as a ring moves them per rank
        got = PREDICT(layout)
        share = {"all_reduce": 2, "all_gather": 1, "reduce_scatter": 1}
        return {
            phase: {
                k: (c, round(b * share[k] * (layout.world - 1) / layout.world))
                for k, (c, b) in kinds.items()
            }
            for phase, kinds in got.items()
        }

    failed = _failed(lesson.check_predict_comms, ring)
    said = failed["sequence parallel"]  # 2 ranks: half of the tensor either way
    assert "each of these mistakes" in said and "as one rank's shard" in said, said
    assert "as a ring moves them" in said, said
    assert "this mistake gives: bytes as a ring" in failed["megatron, bf16, 4 ranks"]


def test_predict_passes_the_reference_and_says_not_attempted_for_the_stub():
    assert lesson.check_predict_comms(PREDICT).status == "passed"
    assert failure(lesson.check_predict_comms, not_attempted).status == "not-attempted"


def _tweaked(**change):
    """The reference with one understanding changed (a half-understanding learner's answer)."""

    def predict(layout):
        element = 4 if change.get("float32") else (2 if layout.dtype == "bfloat16" else 4)
        tokens = layout.batch * layout.seq
        out, hidden = tokens * layout.width * element, tokens * layout.hidden * element
        n = layout.blocks
        grads = n if (layout.norm or change.get("data_grad")) else n - 1
        shard = layout.world if change.get("shard_bytes") else 1
        if layout.style == "megatron":
            fwd = 2 * n if change.get("column_all_reduce") else n
            result = {"forward": {"all_reduce": (fwd, fwd * out)},
                      "backward": {"all_reduce": (grads, grads * out)}}  # fmt: skip
        elif layout.style == "sequence":
            both = {"all_gather": (n, n * out // shard), "reduce_scatter": (n, n * out // shard)}
            result = {"forward": dict(both), "backward": dict(both)}
        elif layout.style == "gathered":
            result = {"forward": {"all_gather": (n, n * hidden // shard)},
                      "backward": {"all_reduce": (grads, grads * out)}}  # fmt: skip
        else:
            result = {"forward": {"all_reduce": (n, n * out)},
                      "backward": {"all_gather": (n, n * hidden // shard)}}  # fmt: skip
        if change.get("no_backward"):
            result["backward"] = {}
        return result

    return predict


@pytest.mark.parametrize(
    "change, cause, case",
    [
        ("no_backward", "no backward", "megatron, no norm before the first block"),
        ("column_all_reduce", "an all-reduce after the column-parallel layer too",
         "megatron, bf16, 4 ranks"),
        ("data_grad", "which the data never needs", "megatron, no norm before the first block"),
        ("float32", "bytes of float32 elements", "megatron, bf16, 4 ranks"),
        ("shard_bytes", "as one rank's shard", "a column layer gathered"),
    ],
)  # fmt: skip
def test_predict_fails_a_mistake_and_names_it_where_the_numbers_are_exactly_that(
    change, cause, case
):
    wrong = _tweaked(**{change: True})
    assert failure(lesson.check_predict_comms, wrong).status == "failed"
    failed = _failed(lesson.check_predict_comms, wrong)
    assert case in failed and cause in failed[case], failed


def _failed(check, answer) -> dict[str, str]:
    """part name -> message of each failed part of the check's body on `answer`."""
    return {p.name: p.message for p in check.__wrapped__(Local(answer)) if p.status == "failed"}


def test_predict_that_keeps_all_reduces_for_sequence_parallel_fails_that_case_only():
    def keeps(layout):
        got = PREDICT(layout)
        if layout.style == "sequence":
            n, out = layout.blocks, layout.batch * layout.seq * layout.width * 4
            return {"forward": {"all_reduce": (n, n * out)},
                    "backward": {"all_reduce": (n, n * out)}}  # fmt: skip
        return got

    assert failure(lesson.check_predict_comms, keeps).status == "failed"
    failed = _failed(lesson.check_predict_comms, keeps)
    assert list(failed) == ["sequence parallel"]
    assert "taken to keep the all-reduces" in failed["sequence parallel"]


def test_predict_passes_lists_zero_entries_and_an_empty_phase_left_out():
    """A valid alternative: lists for pairs, kinds that do not occur given as (0, 0)."""

    def alternative(layout):
        got = PREDICT(layout)
        return {
            phase: {k: list(got[phase].get(k, (0, 0))) for k in lesson.KINDS}
            for phase in ("forward", "backward")
        }

    assert lesson.check_predict_comms(alternative).status == "passed"


def test_predict_that_returns_a_tuple_is_told_the_shape_of_the_answer():
    exc = failure(lesson.check_predict_comms, lambda layout: (1, 2))
    assert exc.status == "error" and '"forward": {kind: (calls, bytes)}' in exc.summary


def test_predict_may_not_count_instead_of_predicting():
    exc = failure(lesson.check_predict_comms, lambda layout: lesson.measured_comms(layout))
    assert exc.status == "error" and "asks for a prediction" in exc.summary


def test_predict_counted_with_the_lessons_parts_is_told_it_ran_a_model():
    """The edition's blind red team rebuilt measured_comms from pretend_world, parallelize and
    step_comms: a forward runs matrix multiplies, a prediction none."""
    exc = failure(lesson.check_predict_comms, edition_attack("PREDICT_COMMS", "predict_comms"))
    assert exc.status == "failed" and "predicted: your function dispatched " in exc.summary


# --- exercise 2: choose (dp, tp, pp) ------------------------------------------------------------


def test_each_scenarios_best_plan_is_unique_and_clear_of_the_memory_margin():
    """THRESHOLDS['slower'] and ['memory_margin'] evidence."""
    slower = lesson.THRESHOLDS["slower"].value
    margin = lesson.THRESHOLDS["memory_margin"].value
    for job in jobs.SCENARIOS:
        fitting = [p for p in job.plans() if jobs.memory_bytes(job, p) <= job.gpu_memory]
        best = min(fitting, key=lambda p: jobs.step_seconds(job, p))
        assert CHOOSE(job) == best
        times = sorted(jobs.step_seconds(job, p) for p in fitting)
        assert len(times) == 1 or times[1] / times[0] > 1.0, job.name
        for plan in job.plans():  # a plan that passes on time is clear of the memory limit
            if jobs.step_seconds(job, plan) <= slower * times[0]:
                need = jobs.memory_bytes(job, plan) / job.gpu_memory
                assert abs(need - 1) > margin, (job.name, plan, need)


def test_choose_passes_the_reference_and_says_not_attempted_for_the_stub():
    assert failure(lesson.check_choose_parallel, not_attempted).status == "not-attempted"
    assert lesson.check_choose_parallel(CHOOSE).status == "passed"


def _memory(job, plan):  # what the notebook's section 5 says, written by a learner
    dp, tp, pp = plan
    m = job.global_batch // (dp * job.micro_batch)
    return 16 * job.params / (tp * pp) + job.activation_bytes / tp * job.layers / pp * min(pp, m)


def _seconds(job, plan, exposed=False):
    dp, tp, pp = plan
    m = job.global_batch // (dp * job.micro_batch)
    compute = 6 * job.params / pp * job.seq_len * job.micro_batch / (tp * job.gpu_flops)
    tp_link = job.nvlink if tp <= job.gpus_per_node else job.network
    link = job.nvlink if job.nodes == 1 else job.network
    tensor = 4 * job.layers / pp * 2 * (tp - 1) / tp * job.message_bytes / tp_link
    sends = 2 * job.message_bytes / link if pp > 1 else 0
    grads = 2 * (dp - 1) / dp * 2 * job.params / (tp * pp) / link
    hidden = 0 if exposed else 2 / 3 * compute
    return (m + pp - 1) * (compute + tensor + sends) + max(0, grads - hidden)


def _tp_in_node(job):  # "TP over the whole node, the rest data parallel, PP if it must"
    for pp in (1, 2, 4, 8):
        plan = (job.gpus // (8 * pp), 8, pp)
        if plan in job.plans() and _memory(job, plan) <= job.gpu_memory:
            return plan
    return job.plans()[-1]


def _pp_only(job):  # "PP across every GPU it can, data parallel for the rest"
    return max((p for p in job.plans() if p[1] == 1), key=lambda p: p[2])


def _no_activations(job):  # the fastest by the model, memory from the states alone
    fits = [p for p in job.plans() if 16 * job.params / (p[1] * p[2]) <= job.gpu_memory]
    return min(fits, key=lambda p: _seconds(job, p))


@pytest.mark.parametrize(
    "rule, failing, said",
    [
        (_tp_in_node, {"a 1.2B model on 2 nodes", "long sequences", "a PCIe server"}, ""),
        (_pp_only, {"long sequences", "a few micro-batches"}, ""),
        (_no_activations, {"long sequences"}, "does not fit"),
    ],
    ids=["tp-over-the-node", "pp-only", "activations-ignored"],
)
def test_choose_fails_the_plausible_wrong_rules(rule, failing, said):
    parts = lesson.check_choose_parallel.__wrapped__(Local(rule))
    failed = {p.name: p.message for p in parts if p.status == "failed"}
    assert failing <= set(failed), failed
    assert all(said in failed[name] for name in failing)


def test_choose_names_tp_across_nodes_and_the_bubble():
    across = lesson.check_choose_parallel.__wrapped__(Local(lambda job: (1, 16, 1)))
    said = {p.name: p.message for p in across if p.status == "failed"}
    assert "spans nodes" in said["a 1.2B model on 2 nodes"], said
    bubble = lesson.check_choose_parallel.__wrapped__(Local(_pp_only))
    said = {p.name: p.message for p in bubble if p.status == "failed"}
    assert "the bubble" in said["a few micro-batches"], said


def test_choose_passes_a_model_that_exposes_all_of_dps_all_reduce():
    """A valid variant of the step model: no overlap of the gradients' all-reduce."""

    def exposed(job):
        fits = [p for p in job.plans() if _memory(job, p) <= job.gpu_memory]
        return min(fits, key=lambda p: _seconds(job, p, exposed=True))

    parts = lesson.check_choose_parallel.__wrapped__(Local(exposed))
    assert all(p.status == "passed" for p in parts), [p.message for p in parts]


def test_choose_says_why_a_plan_cannot_run():
    parts = lesson.check_choose_parallel.__wrapped__(Local(lambda job: (3, 1, 1)))
    assert all(p.status == "failed" and "cannot run" in p.message for p in parts)
    exc = failure(lesson.check_choose_parallel, lambda job: "tp=8")
    assert exc.status == "error" and "three whole numbers" in exc.summary


def test_choose_may_not_call_the_checks_model():
    exc = failure(lesson.check_choose_parallel, lambda job: jobs.step_seconds(job, (1, 1, 1)))
    assert exc.status == "error" and "weigh the plans yourself" in exc.summary


# --- exercise 3: parallelize_module on a block, in a file --------------------------------------

HEAD = (
    "import torch\n"
    "import torch.distributed as dist\n"
    "from torch.distributed.tensor import Replicate, Shard\n"
    "from torch.distributed.tensor.parallel import (\n"
    "    ColwiseParallel, RowwiseParallel, parallelize_module)\n\n\n"
    "def shard_block(block, mesh):\n"
)
WRONG_GATHERED = (
    "    parallelize_module(block, mesh, {'up': ColwiseParallel(output_layouts=Replicate())})\n"
)
WRONG_ROW_ALONE = (
    "    parallelize_module(block, mesh, {'down': RowwiseParallel(input_layouts=Replicate())})\n"
)
WRONG_BOTH_COLUMNS = (
    "    parallelize_module(block, mesh, {'up': ColwiseParallel(), 'down': ColwiseParallel()})\n"
)
WRONG_AVERAGED = (  # split by hand, the partial outputs averaged as DDP averages gradients
    "    rank, n = dist.get_rank(), dist.get_world_size()\n"
    "    share = block.up.out_features // n\n"
    "    mine = slice(rank * share, (rank + 1) * share)\n"
    "    block.up.weight = torch.nn.Parameter(block.up.weight.detach()[mine].clone())\n"
    "    block.up.bias = torch.nn.Parameter(block.up.bias.detach()[mine].clone())\n"
    "    block.down.weight = torch.nn.Parameter(block.down.weight.detach()[:, mine].clone())\n"
    "    def hook(module, args, out):\n"
    "        out = out.clone()\n"
    "        dist.all_reduce(out)\n"
    "        return out / n\n"
    "    block.down.register_forward_hook(hook)\n"
    "    return block\n"
)
VALID_TWO_CALLS = (  # each layer parallelized on its own, nothing returned
    "    parallelize_module(block.up, mesh, ColwiseParallel())\n"
    "    parallelize_module(block.down, mesh, RowwiseParallel())\n"
)


def _file(tmp_path: Path, body: str, name: str = "tp_block.py") -> Path:
    path = tmp_path / name
    path.write_text(HEAD + body)
    return path


def test_shard_passes_the_reference_script(tmp_path):
    path = tmp_path / "tp_block.py"
    path.write_text(SHARD)
    assert lesson.check_shard(path).status == "passed"


def test_shard_says_not_attempted_for_the_learner_copys_cell_without_launching(
    tmp_path, monkeypatch
):
    nb = learner_copy(read(NOTEBOOK), NOTEBOOK.name)
    cell = next(c.source for c in nb.cells if c.source.startswith("%%writefile"))
    path = tmp_path / "tp_block.py"
    path.write_text(cell.split("\n", 1)[1])
    monkeypatch.setattr(parallel_probes, "start", _no_launch)
    assert failure(lesson.check_shard, path).status == "not-attempted"


def _no_launch(*args, **kwargs):
    raise AssertionError("the preflight should have decided without a launch")


@pytest.mark.parametrize(
    "body, said",
    [
        (WRONG_GATHERED, "all of down.weight"),
        (WRONG_ROW_ALONE, "all of up.weight"),
    ],
    ids=["column-gathered", "row-alone"],
)
def test_shard_of_one_layer_is_told_which_weight_is_whole_before_any_launch(
    tmp_path, monkeypatch, body, said
):
    monkeypatch.setattr(parallel_probes, "start", _no_launch)
    exc = failure(lesson.check_shard, _file(tmp_path, body))
    assert exc.status == "failed" and said in exc.summary
    assert "the fewest a split block needs is one all-reduce" in exc.summary


def test_shard_of_two_column_layers_is_told_what_raised_and_its_layout_before_any_launch(
    tmp_path, monkeypatch
):
    """The step raises torch's matmul error; the message adds the layout that made it (both
    weights Shard(dim=0), column-parallel) and the rule (blind round, test_16_blind)."""
    monkeypatch.setattr(parallel_probes, "start", _no_launch)
    exc = failure(lesson.check_shard, _file(tmp_path, WRONG_BOTH_COLUMNS))
    assert exc.status == "failed"
    assert exc.summary.count("Shard(dim=0) (column-parallel)") == 2, exc.summary
    assert "then down row-parallel" in exc.summary


def test_shard_that_averages_the_partial_outputs_gives_other_numbers(tmp_path):
    path = parallel_probes.LearnerFile(_file(tmp_path, WRONG_AVERAGED))
    failed = _failed(shard_check.check_shard_file, path)
    assert set(failed) == {"output equal to the whole block", "gradients equal"}, failed


@pytest.mark.skipif(not ALL, reason="a launch of 2 processes: COURSE_TESTS=all")
def test_shard_with_one_call_per_layer_is_valid(tmp_path):
    assert lesson.check_shard(_file(tmp_path, VALID_TWO_CALLS)).status == "passed"


def test_the_locked_cell_hands_the_check_the_learners_file(tmp_path, monkeypatch):
    """A path is plain data, and a probe given only data runs where the check runs (in the
    judge, outside the learner's sandbox): the locked cell's check_shard hands the check a
    handle on the file, whose probes run beside it; a bare path is refused."""
    seen = []
    monkeypatch.setattr(shard_check, "check_shard_file", lambda f: seen.append(f) or "ok")
    assert lesson.check_shard(tmp_path / "tp_block.py") == "ok"
    assert isinstance(seen[0], parallel_probes.LearnerFile)
    assert seen[0]() == str(tmp_path / "tp_block.py")
    monkeypatch.undo()
    exc = failure(shard_check.check_shard_file, str(tmp_path / "tp_block.py"))
    assert exc.status == "error" and "LearnerFile" in exc.summary


# --- judged as `course grade` judges: the check body here, the learner's side in a child ------


def wrong_no_backward(layout):
    return _tweaked(no_backward=True)(layout)


def wrong_pp_only(job):
    return _pp_only(job)


@pytest.fixture
def judged_answers(tmp_path, monkeypatch):
    """Importable here and in the judged child: this module, and a module naming exercise 3's
    files as the locked cell hands one to the check (a LearnerFile)."""
    here = Path(__file__).parent
    paths = [str(here), str(tmp_path)]
    for path in paths:
        monkeypatch.syspath_prepend(path)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([*paths, os.environ.get("PYTHONPATH", "")]))
    files = {"REFERENCE": SHARD, "GATHERED": HEAD + WRONG_GATHERED}
    lines = ["from course_utils.lessons.parallel.probes import LearnerFile"]
    for name, text in files.items():
        (tmp_path / f"{name.lower()}.py").write_text(text)
        lines.append(f"{name} = LearnerFile({str(tmp_path / f'{name.lower()}.py')!r})")
    (tmp_path / "judged_files_16.py").write_text("\n".join(lines) + "\n")
    monkeypatch.delitem(sys.modules, "judged_files_16", raising=False)


JUDGED_REFERENCES = [
    ("16-predict-comms", "course_utils.lessons.parallel.reference:reference_predict_comms"),
    ("16-choose-parallel", "course_utils.lessons.parallel.reference:reference_choose_parallel"),
    ("16-shard-block", "judged_files_16:REFERENCE"),
]
JUDGED_WRONG = [
    ("16-predict-comms", "check_predict_comms", "test_lesson_16:wrong_no_backward"),
    ("16-choose-parallel", "check_choose_parallel", "test_lesson_16:wrong_pp_only"),
    ("16-shard-block", "check_shard", "judged_files_16:GATHERED"),  # told before a launch
]


@pytest.mark.parametrize(
    "check_id, answer", JUDGED_REFERENCES, ids=[c for c, _ in JUDGED_REFERENCES]
)
def test_the_reference_passes_when_judged_outside_the_learners_process(
    judged_answers, check_id, answer
):
    from judge_helpers import remote_verdict

    verdict = remote_verdict(check_id, answer)
    assert verdict["status"] == "passed", verdict["message"]


@pytest.mark.parametrize(
    "check_id, check, answer", JUDGED_WRONG, ids=[c for c, _, _ in JUDGED_WRONG]
)
def test_a_wrong_answer_gets_the_same_verdict_judged_as_in_a_notebook(
    judged_answers, check_id, check, answer
):
    import importlib

    from judge_helpers import remote_verdict

    module, _, name = answer.partition(":")
    here = status_of(getattr(lesson, check), getattr(importlib.import_module(module), name))
    verdict = remote_verdict(check_id, answer)
    assert here == verdict["status"] == "failed", verdict["message"]
