"""Every number lesson 15's checks compare against, with the evidence that sized it."""

from __future__ import annotations

from ...checks import Threshold

THRESHOLDS = {
    "held_ratio": Threshold(
        0.85,
        "bytes a forward leaves for backward under the learner's policy, over no "
        "checkpointing's, on the same GPT and batch (levers.held_bytes). The reference policy "
        "(save matmuls and attention, recompute the rest): 0.736, 0.759 and 0.758 on the check's "
        "3 sizes; saving the matmuls only: 0.680-0.709; saving every operator: 1.094-1.104 (the "
        "cache keeps outputs autograd would have freed); recomputing every operator: "
        "0.211-0.286, as full checkpointing (tests/test_lesson_15.py, torch 2.14, CPU; exact "
        "counts, no noise)",
        measured_on=("cpu-bf16",),
    ),
    "recompute_ratio": Threshold(
        0.1,
        "FLOPs the learner's plan recomputes in backward, over full checkpointing's (matmuls "
        "and attention by torch.utils.flop_counter's formulas). The reference policy: 0 on the "
        "3 sizes; saving the matmuls but recomputing attention: 0.333, 0.667 and 0.143 "
        "(attention's share grows with T: 128, 256, 64), so 0.1 fails it on the check's sizes "
        "(SIZES[1:], the notebook's aside; 0.75 passed it in the blind round); every matmul and "
        "attention recomputed: 1.0, as full checkpointing (tests/test_lesson_15.py)",
        measured_on=("cpu-bf16",),
    ),
    "grad_atol": Threshold(
        1e-6,
        "max |gradient with the policy - gradient without checkpointing| over all parameters: "
        "the same operators run on the same inputs, so every policy measured gives 0.0 here",
        measured_on=("cpu-bf16",),
    ),
    "fp8_error_ratio": Threshold(
        1.5,
        "the mean over rows of ||round trip - x|| / ||x||, over rowwise e4m3's on the same "
        "tensor, on the check's 5 cases and 4 seeds: a power-of-two rowwise scale 1.02-1.17 "
        "(the case where one feature dominates aside: see fp8_error_floor); rowwise e5m2 "
        "1.90-2.27 (one fewer mantissa bit); tensorwise e4m3 4.95-8.45 on the GPT's activations "
        "with 3 rows 30000x (torch 2.14, CPU; casts are deterministic)",
        measured_on=("cpu-bf16",),
    ),
    "fp8_error_floor": Threshold(
        0.04,
        "mean row error always allowed: e4m3 rounds one value by up to 2^-4 = 6.25%, 2.65% on "
        "average over N(0, 1) samples (float8.format_table). Where one feature dominates each "
        "row, rowwise e4m3 maps it to 448 exactly and its error falls to 0.0012-0.0026, while a "
        "power-of-two scale rounds it (0.021-0.027 over seeds 0-3): as good a quantizer. Rowwise "
        "e5m2 stays above it elsewhere (0.049-0.052)",
        measured_on=("cpu-bf16",),
    ),
    "fp8_flushed": Threshold(
        0.01,
        "the fraction of nonzero entries a round trip turns into 0, beyond rowwise e4m3's on "
        "the same tensor: a scale without the format's max flushes 48-53% where one feature "
        "dominates each row; tensorwise e4m3 18-30% of the GPT's activations with outlier rows; "
        "a power-of-two scale at most 0.1%, rowwise e5m2 none",
        measured_on=("cpu-bf16",),
    ),
}
