"""Lesson 02's reference answers. Demos and checks may call them; a learner's function may
not while it is graded (`@reference`). Each says where it was verified."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from ...checks import reference
from ...device import is_out_of_memory, release_cached_memory
from ...measure import throughput
from ...progress import tqdm


@reference
def reference_sweep(make_step: Callable, batch_sizes: Sequence[int]) -> dict[int, float]:
    """Samples/s of a fresh `make_step(b)` for each b, timed by the harness (warm-up, sync,
    median). Verified by check 02-throughput-sweep on steps of known cost (cpu-bf16, 2 cores)."""
    sizes = tqdm(list(batch_sizes), desc="throughput sweep", leave=False)
    return {b: throughput(make_step(b), b, repeats=10).samples_per_s for b in sizes}


def _fits(make_step: Callable, batch: int) -> bool:
    """Build and run two steps at `batch` (the first step allocates the optimizer's state).
    Everything the try allocated is local here, so it is freed when this function returns."""
    try:
        step = make_step(batch)
        step()
        step()
        return True
    except Exception as exc:
        if not is_out_of_memory(exc):
            raise  # a bug, not a batch that is too large: never hide it
    return False


@reference
def reference_largest_batch(
    make_step: Callable, candidates: Sequence[int], device: torch.device | str | None = None
) -> int | None:
    """The largest candidate (ascending) whose two steps run without running out of memory,
    else None. Verified by check 02-largest-batch on the simulated device, and on real steps
    under `budgeted` (cpu-bf16); not yet run on a CUDA device."""
    best = None
    for b in candidates:
        if not _fits(make_step, b):
            release_cached_memory(device)  # outside `except`: the traceback is gone by now
            break
        best = b
    return best


@reference
def reference_noise_scale(
    gradient: Callable[[int], torch.Tensor], b_small: int, b_big: int, n: int
) -> float:
    """McCandlish et al. 2018, appendix A: unbiased |G|^2 and tr(Sigma) from two batch sizes,
    each squared norm averaged over `n` draws before the ratio. Verified by check
    02-noise-scale against the closed form of NoisyRegression (error sd 4%, 12 seeds)."""
    small = torch.stack([gradient(b_small).pow(2).sum() for _ in range(n)]).mean()
    big = torch.stack([gradient(b_big).pow(2).sum() for _ in range(n)]).mean()
    g2 = (b_big * big - b_small * small) / (b_big - b_small)
    trace = (small - big) / (1 / b_small - 1 / b_big)
    return float(trace / g2)
