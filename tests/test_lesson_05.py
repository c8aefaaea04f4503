"""Lesson 05's checks pass the reference answers and valid alternatives, and fail the
mistakes learners make with a message that names the cause.

The bucketing check is deterministic (counts over a fixed data set). The channels_last
check's speed part is timed in one test only; the others replace it, so no test depends on
the machine being idle. CUDA-only parts are tested by faking the device and the timing.
"""

from __future__ import annotations

import math
import random
import time
from collections import defaultdict
from fractions import Fraction
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from check_helpers import fails, failure, not_attempted, status_of
from judge_helpers import remote_verdict

from course_utils.checks import not_applicable
from course_utils.lessons import fast_kernels as lesson
from course_utils.lessons.fast_kernels import break_even as break_even_mod
from course_utils.lessons.fast_kernels import checks, compiling, demo

CL = torch.channels_last


def part(result, name: str):
    parts = result.parts if hasattr(result, "parts") else result
    return next(p for p in parts if p.name.startswith(name))


def up(n: int, k: int) -> int:
    return -(-n // k) * k


# --- exercise 1: bucketing -------------------------------------------------------------------


def bucketed(k: int):
    """A learner's sampler grouping by the size rounded up to k px per side."""

    def sampler(sizes, batch_size):
        groups = defaultdict(list)
        for i, (h, w) in enumerate(sizes):
            groups[(up(h, k), up(w, k))].append(i)
        return [
            g[j : j + batch_size] for g in groups.values() for j in range(0, len(g), batch_size)
        ]

    return sampler


def rounded_collate(k: int):
    def collate(images):
        h = up(max(im.shape[1] for im in images), k)
        w = up(max(im.shape[2] for im in images), k)
        return torch.stack([F.pad(im, (0, w - im.shape[2], 0, h - im.shape[1])) for im in images])

    return collate


def sorted_by_bucket(k: int):
    """Valid alternative: sort by the rounded size, then cut (batches may straddle buckets)."""

    def sampler(sizes, batch_size):
        order = sorted(range(len(sizes)), key=lambda i: (up(sizes[i][0], k), up(sizes[i][1], k)))
        batches = [order[j : j + batch_size] for j in range(0, len(order), batch_size)]
        random.shuffle(batches)
        return batches

    return sampler


def zeros_then_copy(images):
    """Valid alternative collate: a zero batch of the bucket size, each image copied in."""
    h = up(max(im.shape[1] for im in images), 16)
    w = up(max(im.shape[2] for im in images), 16)
    out = images[0].new_zeros(len(images), 3, h, w)
    for slot, im in zip(out, images, strict=True):
        slot[:, : im.shape[1], : im.shape[2]] = im
    return out


@pytest.fixture
def on_cpu(monkeypatch):
    """The course's device is the CPU, whatever this machine has: these tests state what a
    CPU shows (on a GPU machine the checks measure the CUDA parts instead)."""
    monkeypatch.setenv("COURSE_DEVICE", "cpu")


def test_bucketing_check_passes_the_reference(on_cpu):
    result = lesson.check_bucketing(lesson.reference_bucket_batches, lesson.reference_pad_collate)
    assert result.status == "passed"
    assert part(result, "first epoch").status == "not-applicable"  # no CUDA here


@pytest.mark.parametrize(
    "sampler, collate",
    [
        (bucketed(20), rounded_collate(20)),
        (sorted_by_bucket(16), rounded_collate(16)),
        (bucketed(16), zeros_then_copy),
    ],
    ids=["20px-buckets", "sorted-by-bucket-then-cut", "zeros-then-copy-collate"],
)
def test_bucketing_check_passes_valid_alternatives(sampler, collate):
    assert lesson.check_bucketing(sampler, collate).status == "passed"


def test_bucketing_check_fails_padding_to_the_global_max_for_its_padding():
    exc = failure(lesson.check_bucketing, lesson.random_batches, lesson.pad_to_global_max)
    assert "padding overhead" in exc.summary and "one global size" in exc.summary
    assert "distinct batch shapes: shapes reaching" in exc.summary  # that part passed


@pytest.mark.parametrize("sampler", [lesson.sorted_batches, lesson.random_batches])
def test_bucketing_check_fails_no_bucketing_for_its_shape_count(sampler):
    exc = failure(lesson.check_bucketing, sampler, lesson.pad_to_batch_max)
    assert "distinct batch shapes" in exc.summary and "above the 40 allowed" in exc.summary
    assert "padded to their own" in exc.summary


def test_bucketing_check_fails_rounding_without_grouping_for_mixed_batches():
    exc = failure(lesson.check_bucketing, lesson.random_batches, rounded_collate(16))
    assert "small and large images share batches" in exc.summary


def test_bucketing_check_fails_buckets_too_fine_or_too_coarse():
    assert (
        "above the 40 allowed"
        in failure(lesson.check_bucketing, bucketed(8), rounded_collate(8)).summary
    )
    assert (
        "share batches"
        in failure(lesson.check_bucketing, bucketed(24), rounded_collate(24)).summary
    )


def test_bucketing_check_fails_dropping_the_short_batches():
    def drop_last(sizes, batch_size):
        return [b for b in bucketed(16)(sizes, batch_size) if len(b) == batch_size]

    exc = failure(lesson.check_bucketing, drop_last, rounded_collate(16))
    assert "never reach the model" in exc.summary


def test_bucketing_check_fails_cropping_or_resizing_to_the_bucket():
    def crop(images):
        h = max(16, min(im.shape[1] for im in images) // 16 * 16)
        w = max(16, min(im.shape[2] for im in images) // 16 * 16)
        return torch.stack(
            [
                F.pad(im, (0, max(0, w - im.shape[2]), 0, max(0, h - im.shape[1])))[:, :h, :w]
                for im in images
            ]
        )

    def resize(images):
        h = up(max(im.shape[1] for im in images), 16)
        w = up(max(im.shape[2] for im in images), 16)
        return torch.stack(
            [F.interpolate(im[None].float(), size=(h, w))[0].to(torch.uint8) for im in images]
        )

    assert "truncated" in failure(lesson.check_bucketing, bucketed(16), crop).summary
    assert "pixels changed" in failure(lesson.check_bucketing, bucketed(16), resize).summary


def test_bucketing_check_fails_batches_larger_than_batch_size():
    def big(sizes, batch_size):
        return bucketed(16)(sizes, 4 * batch_size)

    assert (
        "at most 16 (batch_size)"
        in failure(lesson.check_bucketing, big, rounded_collate(16)).summary
    )


def test_bucketing_check_reports_not_attempted_and_rejects_delegation():
    assert fails(lesson.check_bucketing, not_attempted, not_attempted) == "not-attempted"

    def delegating(sizes, batch_size):
        return lesson.reference_bucket_batches(sizes, batch_size)

    assert (
        "reference answer"
        in failure(lesson.check_bucketing, delegating, rounded_collate(16)).summary
    )


def test_bucketing_check_times_a_first_epoch_on_cuda(monkeypatch):
    """On CUDA the speed part is graded: fake the device and an epoch whose cost is an
    autotuning run per new shape plus the pixels computed on."""
    monkeypatch.setattr(checks, "get_device", lambda: torch.device("cuda"))

    def fake_epoch(batches, collate, images, *, width, benchmark=True):
        outs = [collate([images[i] for i in b]) for b in batches]
        return 0.02 * len({tuple(o.shape) for o in outs}) + 1e-9 * sum(o.numel() for o in outs)

    monkeypatch.setattr(demo, "first_epoch_s", fake_epoch)
    result = lesson.check_bucketing(lesson.reference_bucket_batches, lesson.reference_pad_collate)
    assert part(result, "first epoch").status == "passed"
    assert part(result, "first epoch").value > checks.THRESHOLDS["autotune_speedup"].value


# --- exercise 2: channels_last ------------------------------------------------------------------


@pytest.fixture
def no_timing(monkeypatch):
    """Correctness only: the speed part is replaced (it is timed in one test below)."""
    monkeypatch.setattr(
        checks, "_cl_speed", lambda *a: not_applicable("speed", "not timed in this test")
    )


class MeanGate(lesson.LegacySqueezeExcite):
    def forward(self, x):
        return x * torch.sigmoid(self.fc2(torch.relu(self.fc1(x.mean((2, 3))))))[:, :, None, None]


class PoolGate(lesson.LegacySqueezeExcite):
    """Valid alternative: adaptive pooling, a view of the small gate, an explicit layout."""

    def forward(self, x):
        b, c = x.shape[:2]
        x = x.contiguous(memory_format=CL)
        s = F.adaptive_avg_pool2d(x, 1).flatten(1)
        return x * torch.sigmoid(self.fc2(torch.relu(self.fc1(s)))).view(b, c, 1, 1)


class FlattenGate(lesson.LegacySqueezeExcite):
    def forward(self, x):
        s = x.flatten(2).mean(-1)
        return x * torch.sigmoid(self.fc2(torch.relu(self.fc1(s)))).unsqueeze(-1).unsqueeze(-1)


class MaxGate(lesson.LegacySqueezeExcite):
    def forward(self, x):
        return x * torch.sigmoid(self.fc2(torch.relu(self.fc1(x.amax((2, 3))))))[:, :, None, None]


def convert(model, x):
    return model.to(memory_format=CL), x.contiguous(memory_format=CL)


def test_channels_last_check_passes_the_reference_with_its_speed_on_this_cpu(on_cpu):
    result = lesson.check_channels_last(
        lesson.reference_to_channels_last, lesson.ReferenceSqueezeExcite
    )
    assert result.status == "passed"
    speed = part(result, "speed")
    assert speed.value is not None and speed.status in ("passed", "not-applicable")


@pytest.mark.parametrize("gate", [MeanGate, PoolGate, FlattenGate])
def test_channels_last_check_passes_valid_gates(no_timing, gate):
    assert lesson.check_channels_last(convert, gate).status == "passed"


@pytest.mark.parametrize(
    "to_cl, gate, cause",
    [
        (lambda m, x: (m, x.to(memory_format=CL)), MeanGate, "conv weights are still NCHW"),
        (lambda m, x: (m.to(memory_format=CL), x), MeanGate, "the input you return is NCHW"),
        (
            convert,
            lesson.LegacySqueezeExcite,
            "`block1.se` (LegacySqueezeExcite) turned a channels_last input",
        ),
        (
            lambda m, x: (m.to(memory_format=CL), x.permute(0, 2, 3, 1)),
            MeanGate,
            "changes the strides, not the shape",
        ),
        (convert, MaxGate, "same output"),
    ],
    ids=["input-only", "model-only", "contiguous-in-forward", "permuted-input", "max-pooled-gate"],
)
def test_channels_last_check_fails_half_conversions_with_the_cause(no_timing, to_cl, gate, cause):
    exc = failure(lesson.check_channels_last, to_cl, gate)
    assert exc.status == "failed" and cause in exc.summary


def test_channels_last_check_rejects_a_subclass_of_the_reference_gate(no_timing):
    class Borrowed(lesson.ReferenceSqueezeExcite):
        pass

    assert "reference answer" in failure(lesson.check_channels_last, convert, Borrowed).summary


def test_channels_last_check_reports_not_attempted(no_timing):
    class Stub(lesson.LegacySqueezeExcite):
        def forward(self, x):
            raise NotImplementedError()

    assert fails(lesson.check_channels_last, not_attempted, MeanGate) == "not-attempted"
    assert fails(lesson.check_channels_last, convert, Stub) == "not-attempted"


def test_channels_last_speed_is_reported_not_graded_on_a_plain_cpu(on_cpu, monkeypatch):
    monkeypatch.setattr(checks, "device_class", lambda *a: "cpu")
    monkeypatch.setattr(checks, "compare", lambda *a, **k: type("C", (), {"speedup": 0.9})())
    result = lesson.check_channels_last(convert, MeanGate)
    assert status_of(lesson.check_channels_last, convert, MeanGate) == "passed"
    assert part(result, "speed").status == "not-applicable" and part(result, "speed").value == 0.9


def test_channels_last_speed_is_not_applicable_on_a_gpu(monkeypatch):
    """On CUDA the check's small fp32 model cannot show the effect; the demo measures it."""
    monkeypatch.setattr(checks, "get_device", lambda: torch.device("cuda"))
    monkeypatch.setattr(checks, "device_class", lambda *a: "cuda-tensorcore")
    result = lesson.check_channels_last(convert, MeanGate)
    assert result.status == "passed" and part(result, "speed").status == "not-applicable"


def test_channels_last_speed_below_threshold_fails_on_cpu_bf16(on_cpu, monkeypatch):
    monkeypatch.setattr(checks, "device_class", lambda *a: "cpu-bf16")
    monkeypatch.setattr(checks, "compare", lambda *a, **k: type("C", (), {"speedup": 0.9})())
    assert "below the 1.05x" in failure(lesson.check_channels_last, convert, MeanGate).summary


# --- exercise 3: break-even ------------------------------------------------------------------


@pytest.fixture
def fixed_timing(monkeypatch):
    """A measured-looking timing (compiled 20% faster), so these tests need no compile."""
    timing = compiling.CompileTiming(first_call_s=2.0, eager_step_s=0.020, compiled_step_s=0.016)
    monkeypatch.setattr(compiling, "dynamo_timing", lambda: timing)


def running_totals(timing, run_steps, compiles=1):
    """Valid alternative: add up both runs step by step and compare at the end."""
    eager, compiled = 0.0, compiles * (timing.first_call_s - timing.compiled_step_s)
    for _ in range(min(run_steps, 10**5)):
        eager, compiled = eager + timing.eager_step_s, compiled + timing.compiled_step_s
    rest = run_steps - min(run_steps, 10**5)
    return compiled + rest * timing.compiled_step_s < eager + rest * timing.eager_step_s


def via_break_even(timing, run_steps, compiles=1):
    """Valid alternative: the break-even in exact fractions, then a strict comparison."""
    eager, compiled, first = (
        Fraction(v) for v in (timing.eager_step_s, timing.compiled_step_s, timing.first_call_s)
    )
    return eager > compiled and run_steps > compiles * (first - compiled) / (eager - compiled)


def _gain(t):
    return t.eager_step_s - t.compiled_step_s


def tie_compiles(t, n, compiles=1):
    return _gain(t) > 0 and n >= compiles * (t.first_call_s - t.compiled_step_s) / _gain(t)


def whole_first_call(t, n, compiles=1):
    return _gain(t) > 0 and n > compiles * t.first_call_s / _gain(t)


def compiles_once(t, n, compiles=1):
    return _gain(t) > 0 and n > (t.first_call_s - t.compiled_step_s) / _gain(t)


def speedup_ratio(t, n, compiles=1):
    ratio = t.eager_step_s / t.compiled_step_s
    return ratio > 1 and n > compiles * (t.first_call_s - t.compiled_step_s) / ratio


def slower_compiles(t, n, compiles=1):
    """Solves for the break-even without asking whether the compiled step is faster."""
    if _gain(t) == 0:
        return False
    return n > compiles * (t.first_call_s - t.compiled_step_s) / _gain(t)


def eager_step_overhead(t, n, compiles=1):
    return n * _gain(t) > compiles * (t.first_call_s - t.eager_step_s)


def faster_step_only(t, n, compiles=1):
    return t.compiled_step_s < t.eager_step_s


def rounds_break_even(t, n, compiles=1):
    return _gain(t) > 0 and n > round(compiles * (t.first_call_s - t.compiled_step_s) / _gain(t))


def keeps_cost_in_timing(t, n, compiles=1):
    t.first_call_s -= t.compiled_step_s
    return n * _gain(t) > compiles * t.first_call_s


def returns_break_even(t, n, compiles=1):
    """The old exercise's answer: a number of steps, not a decision."""
    return (
        math.ceil(compiles * (t.first_call_s - t.compiled_step_s) / _gain(t))
        if _gain(t) > 0
        else math.inf
    )


def test_break_even_check_passes_the_reference_on_timings_measured_now():
    assert lesson.check_break_even(lesson.reference_should_compile).status == "passed"


@pytest.mark.parametrize("answer", [running_totals, via_break_even])
def test_break_even_check_passes_valid_alternatives(fixed_timing, answer):
    assert lesson.check_break_even(answer).status == "passed"


@pytest.mark.parametrize(
    "wrong, cause",
    [
        (tie_compiles, "strictly sooner"),
        (whole_first_call, "whole first call was counted as compile time"),
        (compiles_once, "compiles (one per shape) were counted once"),
        (speedup_ratio, "not their ratio"),
        (slower_compiles, "not faster never pays back"),
        (eager_step_overhead, "not minus an eager step"),
        (faster_step_only, "a short run stays eager"),
        (rounds_break_even, "rounded to the nearest step"),
        (keeps_cost_in_timing, "changed its timing argument"),
        (returns_break_even, "not True or False"),
    ],
    ids=["tie-compiles", "first-call-counted-whole", "recompiles-ignored", "ratio-not-difference",
         "slower-step-compiles", "eager-step-overhead", "faster-step-only", "rounds-break-even",
         "mutates-its-timing", "returns-a-number"],
)  # fmt: skip
def test_break_even_check_fails_the_usual_mistakes_with_the_cause(fixed_timing, wrong, cause):
    exc = failure(lesson.check_break_even, wrong)
    assert exc.status == "failed" and cause in exc.summary


def test_break_even_check_reports_a_division_by_zero_on_a_tie_without_a_traceback(fixed_timing):
    def divides(t, n, compiles=1):
        return n > compiles * (t.first_call_s - t.compiled_step_s) / _gain(t)

    exc = failure(lesson.check_break_even, divides)
    assert exc.status == "failed" and "divided by zero" in exc.summary


def test_break_even_check_names_no_cause_when_no_single_mistake_explains_the_answers(fixed_timing):
    def two_mistakes(t, n, compiles=1):
        return _gain(t) > 0 and n >= t.first_call_s / _gain(t)

    summary = failure(lesson.check_break_even, two_mistakes).summary
    assert "see the exercise's hint" in summary and "counted once" not in summary


def test_run_lengths_sit_on_both_sides_of_a_whole_number_break_even():
    t = compiling.CompileTiming(first_call_s=0.5, eager_step_s=0.25, compiled_step_s=0.125)
    assert lesson.exact_break_even(t) == 3  # a tie at 3 steps: 3 * 0.125 saved = 0.375 compile cost
    assert break_even_mod.run_lengths(t, 1) == [1, 2, 3, 4, 40]  # a short run, then both sides
    assert lesson.reference_should_compile(t, 3) is False
    assert lesson.reference_should_compile(t, 4) is True


def test_break_even_check_reports_not_attempted_and_rejects_delegation(fixed_timing):
    assert fails(lesson.check_break_even, not_attempted) == "not-attempted"

    def delegating(t, n, compiles=1):
        return lesson.reference_should_compile(t, n, compiles)

    assert "reference answer" in failure(lesson.check_break_even, delegating).summary

    def via_lessons_break_even(t, n, compiles=1):
        return n > lesson.exact_break_even(t, compiles)

    assert "reference answer" in failure(lesson.check_break_even, via_lessons_break_even).summary


# --- demos ----------------------------------------------------------------------------------


def test_layout_trace_finds_nothing_once_the_gate_is_fixed():
    legacy, fixed = lesson.make_pair(MeanGate)
    x = lesson.images(4).to(memory_format=CL)
    assert len(lesson.layout_trace(legacy.to(memory_format=CL), x)) == 2
    assert lesson.layout_trace(fixed.to(memory_format=CL), x) == []


def test_layout_trace_converts_a_copy_itself_when_given_the_format():
    """Section 3 traces without showing the conversion (exercise 2's first part, issue 34):
    given memory_format, the tracer converts a copy of the model and the input, and leaves
    the caller's NCHW network as it was."""
    legacy, _ = lesson.make_pair(MeanGate)
    x = lesson.images(4)
    assert len(lesson.layout_trace(legacy, x, memory_format=CL)) == 2
    assert lesson.nchw_weights(legacy) and not x.is_contiguous(memory_format=CL)


@pytest.mark.parametrize(
    "fixed, legacy, says",
    [(0.99, 1.0, "does not pay"), (0.78, 0.8, "cost little"), (0.7, 0.95, "gives part of it back")],
)
def test_layout_verdict_says_what_the_timings_show(fixed, legacy, says):
    times = {"NCHW": 1.0, "channels_last, legacy gate": legacy, "channels_last, fixed gate": fixed}
    assert says in lesson.layout_verdict(times, "cpu")


def test_demos_fall_back_to_the_reference_gate_while_the_exercise_is_unwritten():
    class Stub(lesson.LegacySqueezeExcite):
        def forward(self, x):
            raise NotImplementedError()

    assert lesson.gate_or_reference(Stub) is lesson.ReferenceSqueezeExcite
    assert lesson.gate_or_reference(MeanGate) is MeanGate


def test_loader_stats_counts_shapes_and_padding_exactly():
    images = [torch.ones(3, 2, 2, dtype=torch.uint8), torch.ones(3, 4, 4, dtype=torch.uint8)]
    stats = lesson.loader_stats([[0, 1]], lesson.pad_to_batch_max, images)
    assert stats.distinct_shapes == 1 and stats.padding_overhead == pytest.approx(32 / 20 - 1)
    assert stats.problems == []


def test_cudnn_timings_are_not_applicable_off_cuda_and_run_on_any_device(on_cpu):
    assert lesson.autotune_costs() is None
    costs = demo.measure_modes(torch.device("cpu"), width=4, batch=2, size=8)
    assert [c.mode for c in costs] == ["default", "benchmark", "deterministic"]
    assert all(c.first_call_s > 0 and c.steady_s > 0 and c.common_s > 0 for c in costs)
    images = lesson.variable_size_images(64)
    batches = lesson.random_batches(lesson.image_sizes(64), 16)
    assert (
        demo.first_epoch_s(
            batches, lesson.pad_to_batch_max, images, width=4, device=torch.device("cpu")
        )
        > 0
    )


def test_count_graphs_compiles_once_per_shape_without_dynamic_shapes():
    inputs = [torch.randn(n, 4) for n in (2, 3, 4, 3)]
    static = lesson.count_graphs(torch.nn.functional.relu, inputs, dynamic=False)
    default = lesson.count_graphs(torch.nn.functional.relu, inputs, dynamic=None)
    assert (static.distinct_shapes, static.graphs, default.graphs) == (3, 3, 2)
    assert not static.hit_limit


def test_count_graphs_says_when_the_recompile_limit_sent_shapes_to_eager():
    import torch._dynamo

    # config.patch, not monkeypatch: pytest undoes a setattr on a module with delattr,
    # which hides a dynamo config entry for the rest of the session.
    inputs = [torch.randn(n, 4) for n in (2, 3, 4, 5)]
    with torch._dynamo.config.patch(recompile_limit=2):
        capped = lesson.count_graphs(torch.nn.functional.relu, inputs, dynamic=False)
        assert (capped.graphs, capped.hit_limit) == (2, True)


# --- the measuring in plain sight ------------------------------------------------------------


def test_time_in_rotation_times_every_step_in_each_round_in_turn_after_two_warm_up_rounds():
    order: list[str] = []
    steps = {name: (lambda name=name: order.append(name)) for name in "ABC"}
    medians = lesson.time_in_rotation(steps, repeats=3, device=torch.device("cpu"))
    assert set(medians) == set("ABC") and all(m >= 0 for m in medians.values())
    rounds = [order[i : i + 3] for i in range(0, len(order), 3)]
    assert rounds == [list("ABC"), list("BCA"), list("CAB"), list("ABC"), list("BCA")]


def test_time_compile_times_the_first_compiled_call_alone_then_both_steady_states():
    calls = {"eager": 0, "compiled": 0}

    def eager():
        calls["eager"] += 1

    def compiled():
        calls["compiled"] += 1
        if calls["compiled"] == 1:
            time.sleep(0.05)  # the compile

    t = lesson.time_compile(eager, compiled, torch.device("cpu"), repeats=3, warmup=2)
    assert t.first_call_s >= 0.05 and t.compiled_step_s < 0.01 and t.eager_step_s < 0.01
    assert calls["compiled"] > 1 + 2 and calls["eager"] > 2


def test_notebook_shows_the_code_of_its_measurements_and_the_reference_runs():
    """layout_timings', the break-even's, cuDNN autotuning's and the graph counts' measuring code
    is shown beside the call; where a CPU cannot show cuDNN autotuning or inductor on a GPU, a
    demo cell shows committed runs."""
    import json

    path = Path(__file__).resolve().parents[1] / "solutions" / "05_fast_kernels.ipynb"
    cells = json.loads(path.read_text())["cells"]
    code = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
    shown_beside = (
        ("time_in_rotation", "layout_timings("),
        ("time_compile", "timing("),
        ("measure_modes", "autotune_costs("),  # issue 34: section 1's and 4's counts too
        ("count_graphs", "graph_counts("),
    )
    for shown, call in shown_beside:
        assert any(f"cu.show_source(lesson.{shown})" in s and call in s for s in code), shown
    demos = [
        "".join(c["source"])
        for c in cells
        if "demo" in c["metadata"].get("tags", [])
        and "cu.reference_results(" in "".join(c["source"])
    ]
    assert demos and '"05_fast_kernels", exclude_class=cu.device_class()' in demos[0]


# --- judged outside the learner's kernel, as `course grade` does -----------------------------

REFERENCE = "course_utils.lessons.fast_kernels.reference:"
DEMO = "course_utils.lessons.fast_kernels.demo:"


@pytest.fixture
def importable(monkeypatch):
    """The learner's side (a child process) imports its answers from this test file."""
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).resolve().parent))


def input_only(model, x):
    """The input converted, the model left NCHW."""
    return model, x.to(memory_format=CL)


@pytest.mark.parametrize(
    "check_id, right, wrong, local",
    [
        (
            "05-bucketing",
            (REFERENCE + "reference_bucket_batches", REFERENCE + "reference_pad_collate"),
            ((DEMO + "sorted_batches", DEMO + "pad_to_batch_max"),
             (lesson.sorted_batches, lesson.pad_to_batch_max)),
            lesson.check_bucketing,
        ),
        (
            "05-channels-last",
            (REFERENCE + "reference_to_channels_last", REFERENCE + "ReferenceSqueezeExcite"),
            (("test_lesson_05:input_only", "test_lesson_05:MeanGate"), (input_only, MeanGate)),
            lesson.check_channels_last,
        ),
        (
            "05-break-even",
            (REFERENCE + "reference_should_compile",),
            (("test_lesson_05:tie_compiles",), (tie_compiles,)),
            lesson.check_break_even,
        ),
    ],
    ids=["05-bucketing", "05-channels-last", "05-break-even"],
)  # fmt: skip
def test_judged_remotely_the_reference_passes_and_a_mistake_fails_as_in_a_notebook(
    on_cpu, fixed_timing, importable, check_id, right, wrong, local
):
    """The check body in this process (the judge: the images' order and the input drawn, the
    counts, the legacy network's outputs, the NCHW baseline and its timing, the decisions
    expected), every call to the answer in a child (the kernel) through probes: the
    reference passes, a mistake gets its notebook verdict."""
    judged = remote_verdict(check_id, *right)
    assert judged["status"] == "passed", judged["message"]
    names, answers = wrong
    judged = remote_verdict(check_id, *names)
    assert judged["status"] == fails(local, *answers) == "failed", judged["message"]
