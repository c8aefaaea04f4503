"""Lesson 05: letting the backend pick fast kernels: cuDNN autotuning and bucketing
(demo), channels_last (layout), torch.compile (compiling); answers in reference, graded
checks in checks."""

from .break_even import check_break_even, exact_break_even
from .checks import THRESHOLDS, check_bucketing, check_channels_last
from .compiling import (
    CompileTiming,
    GraphCount,
    can_compile,
    compile_timing,
    count_graphs,
    dynamo_timing,
    fusion_timing,
    graph_counts,
    recompile_limit,
    time_compile,
)
from .demo import (
    BATCH,
    LoaderStats,
    autotune_costs,
    image_sizes,
    loader_stats,
    measure_modes,
    pad_to_batch_max,
    pad_to_global_max,
    plot_strategies,
    random_batches,
    sorted_batches,
    strategy_table,
    variable_size_images,
)
from .layout import (
    LegacySqueezeExcite,
    SENet,
    gate_or_reference,
    images,
    layout_timings,
    layout_trace,
    layout_verdict,
    make_pair,
    nchw_weights,
    time_in_rotation,
)
from .reference import (
    ReferenceSqueezeExcite,
    reference_bucket_batches,
    reference_pad_collate,
    reference_should_compile,
    reference_to_channels_last,
)

__all__ = [
    "BATCH",
    "THRESHOLDS",
    "CompileTiming",
    "GraphCount",
    "LegacySqueezeExcite",
    "LoaderStats",
    "ReferenceSqueezeExcite",
    "SENet",
    "autotune_costs",
    "can_compile",
    "exact_break_even",
    "check_break_even",
    "check_bucketing",
    "check_channels_last",
    "compile_timing",
    "count_graphs",
    "dynamo_timing",
    "fusion_timing",
    "gate_or_reference",
    "graph_counts",
    "image_sizes",
    "images",
    "layout_timings",
    "layout_trace",
    "layout_verdict",
    "loader_stats",
    "make_pair",
    "measure_modes",
    "nchw_weights",
    "pad_to_batch_max",
    "pad_to_global_max",
    "plot_strategies",
    "random_batches",
    "recompile_limit",
    "reference_should_compile",
    "reference_bucket_batches",
    "reference_pad_collate",
    "reference_to_channels_last",
    "sorted_batches",
    "strategy_table",
    "time_compile",
    "time_in_rotation",
    "variable_size_images",
]

# harness functions that compute an exercise's answer under another name: the grading kernel
# withholds them (course_utils.grading.kernel_harness). None here beyond what the learner
# edition already withholds (reference_*, ReferenceSqueezeExcite, exact_break_even); the
# lesson's helpers that compute a break-even (break_even.run_lengths, MISTAKES) go through
# exact_break_even.
ANSWERS_ELSEWHERE = ()
