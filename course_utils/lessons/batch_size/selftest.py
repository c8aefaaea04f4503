"""What `course selftest` runs for notebook 02: each check with its reference answer, and the
headline effect (samples/s at the throughput knee against the smallest batch) as section 2
does."""

from __future__ import annotations

from ...effects import effect
from ...measure import knee, steady_cpu
from ...mode import pick
from . import reference as ref
from .demo import make_step


def answers() -> dict:
    """check id -> the arguments its locked cell passes, as the reference answers."""
    return {
        "02-throughput-sweep": lambda: (ref.reference_sweep,),
        "02-largest-batch": lambda: (ref.reference_largest_batch,),
        "02-noise-scale": lambda: (ref.reference_noise_scale,),
    }


def knee_effect():
    sizes = pick(quick=[4, 16, 64, 256, 1024], full=[16, 32, 64, 128, 256, 512, 1024, 2048, 4096])
    with steady_cpu():
        sweep = ref.reference_sweep(make_step, sizes)
    best = knee(sweep, within=0.2)
    return effect(
        "larger batch, up to the throughput knee",
        metric="training samples per second",
        unit="samples/s",
        baseline=sweep[sizes[0]],
        improved=sweep[best],
        better="higher",
        show=False,
    )


def effects() -> dict:
    return {"throughput knee": knee_effect}
