"""Lesson 07's checkpointed / plain step-time ratio with kernels taken out: the check's step
(16 blocks of width 32, batch 512, dropout 0.1) on the meta device, where every op is
dispatched but computes nothing, so what remains is the host-side cost a launch-bound GPU
step also pays. Evidence for THRESHOLDS["time_ratio_gpu"] (lessons/accumulation/checks.py).

    PYTHONPATH=. python scripts/checkpoint_ratio_meta.py
"""

from __future__ import annotations

import statistics
import time

import torch

from course_utils.lessons.accumulation import demo


def ratio(step, plain, pairs: int = 15, calls: int = 5) -> list[float]:
    out = []
    for _ in range(pairs):
        t0 = time.perf_counter()
        for _ in range(calls):
            plain()
        t1 = time.perf_counter()
        for _ in range(calls):
            step()
        out.append((time.perf_counter() - t1) / (t1 - t0))
    return out


def main() -> None:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    blocks = torch.nn.Sequential(*[demo.Block(32, 0.1) for _ in range(16)]).to("meta")
    x = torch.randn(512, 32, device="meta")
    plain = demo.train_step(demo.plain_forward, blocks, x)
    plain()
    for name, forward in {
        "per block": demo.per_block_forward,
        "4 segments": demo.segments_forward(4),
    }.items():
        step = demo.train_step(forward, blocks, x)
        step()
        r = ratio(step, plain)
        print(f"{name}: median {statistics.median(r):.2f}x (pairs {min(r):.2f}-{max(r):.2f})")


if __name__ == "__main__":
    main()
