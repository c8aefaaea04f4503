"""The numbers that turn a measurement into a finding, each with the evidence that sized it.

A finding must be worth acting on: a measured gain well above what noise on a loaded machine
produces between equivalent variants, so that a tuned loop gets no false alarms. Evidence:
tests/test_diagnose.py's planted and tuned loops, n=6 each (12 for batch), one torch thread,
cpu-bf16 2-core machine at load average 8-10, torch 2.14 (calibration script in the report).
"""

from __future__ import annotations

from ..checks import Threshold

THRESHOLDS = {
    "data_gain": Threshold(
        1.2,
        "step with the loader / step on batches already fetched. Decode-per-item images, "
        "num_workers=0, SmallCNN w8 batch 128 at 16px: 3.7-4.9x; in-memory batches 0.84-1.32x "
        "(noise: hence data_wait must hold too)",
    ),
    "data_wait": Threshold(
        0.15,
        "share of the step spent in next(loader): decode-per-item with no workers 0.73-0.80; "
        "in-memory batch lists < 0.001",
    ),
    "syncs_per_step": Threshold(
        1.0,
        "host reads per step from the learner's code: a loop that reads its loss every step "
        "has 1.0; the course's train() reads once at the end (0 in the window)",
    ),
    "amp_gain": Threshold(
        1.10,
        "whole-step speed-up from autocast (forward+backward timed both ways on a copy). "
        "SmallCNN w8 batch 128 at 16px in fp32 on cpu-bf16 measured 0.87-1.46x: a real, "
        "marginal effect there; a tensor-core GPU shows 1.5x and more (lesson 04)",
    ),
    "optimizer_gain": Threshold(
        1.05,
        "whole-step speed-up from a fused step (optimizer steps timed on copies of the "
        "parameters): MLP 16 wide, 64 deep (130 tensors), batch 2048, for-loop Adam: "
        "1.15-1.34x; the optimizer step alone 4-35x",
    ),
    "batch_gain": Threshold(
        1.5,
        "samples/s at 2x or 4x the batch over the current one, forward+backward on a copy "
        "('far below the knee'): MLP at batch 2: 3.7-4.0x at 4x; flat cases (SmallCNN w8 at "
        "128, MLP at 2048) 0.75-1.31x",
    ),
    "batch_agree": Threshold(
        1.15,
        "samples/s at 2x the batch, which must agree that larger is faster: MLP at batch 2: "
        "1.68-2.13x; flat cases 0.86-1.35x (so one noisy 4x timing cannot raise it alone)",
    ),
    "layout_gain": Threshold(
        1.05,
        "whole-step speed-up from channels_last or cudnn.benchmark (timed on a copy); "
        "not calibrated on a GPU here: tensor-core GPUs typically show 1.1-1.3x on conv nets "
        "(PyTorch's channels_last tutorial)",
    ),
}


def value(name: str) -> float:
    return THRESHOLDS[name].value


def step_gain(step_s: float, part_s: float, speedup: float) -> float:
    """Whole-step speed-up when a part of the step taking `part_s` gets `speedup` faster."""
    saved = part_s * (1 - 1 / speedup) if speedup > 0 else 0.0
    saved = min(saved, 0.9 * step_s)  # noise must not promise an infinite gain
    return step_s / (step_s - saved)
