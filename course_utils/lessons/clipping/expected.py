"""What two clipped steps must leave, where the reference step is not at hand.

08-clipped-step compares the learner's two steps with the reference's, and 08-accum-clip its
accumulated steps with clipped steps on the whole batch. The learner edition has neither
(`reference_clipped_step`, `accumulation._whole_batch_step`), so that its self-checks still
say right or wrong, `course release` runs them on the notebook's specimens (the first of
checks.STEP_SEEDS, accum_check.ACCUM_SEEDS and ACCUM_K) and writes the parameters and norms they give into
shipped_steps.py, values and no code. The judge of `course grade` draws other specimens too,
and always has the references; the grading kernel's harness is built without the shipped file.
"""

from __future__ import annotations

import base64
from pathlib import Path

import torch

from ...errors import ReferenceWithheld
from . import accumulation
from .probes import step_case, two_steps
from .reference import reference_clipped_step

SHIPPED = "shipped_steps.py"
MAX_NORMS = (0.5, 1000.0)  # the check's two cases: clipping acts, clipping idle


def expected_steps(seed: int, batch_seed: int, max_norm: float) -> tuple[list[torch.Tensor], float]:
    """The parameters after two reference steps on step_case(seed, batch_seed), and the norm
    the second returned: computed here, or read from the edition's shipped values."""
    model, batches = step_case(seed, batch_seed)
    try:
        params, norm = two_steps(reference_clipped_step, model, batches, max_norm)
        return params, float(norm)
    except ReferenceWithheld:
        try:
            from .shipped_steps import STEPS
        except ImportError:
            raise ReferenceWithheld("reference_clipped_step") from None
        if (seed, batch_seed, max_norm) not in STEPS:
            raise
        blobs, norm = STEPS[seed, batch_seed, max_norm]
        shapes = [p.shape for p in model.parameters()]
        return [_tensor(b, s) for b, s in zip(blobs, shapes, strict=True)], norm


def _tensor(blob: str, shape: torch.Size) -> torch.Tensor:
    raw = bytearray(base64.b64decode(blob))
    return torch.frombuffer(raw, dtype=torch.float32).reshape(shape).clone()


def expected_whole_batch(seed: int, batch_seed: int, k: int, max_norm: float) -> dict:
    """accumulation.whole_batch on accum_case(seed, batch_seed, k): the parameters after, and
    each step's norm; computed here, or read from the edition's shipped values."""
    model, batches = accumulation.accum_case(seed, batch_seed, k)
    try:
        return accumulation.whole_batch(model, batches, max_norm)
    except ReferenceWithheld:
        try:
            from .shipped_steps import ACCUM
        except ImportError:
            raise ReferenceWithheld("_whole_batch_step") from None
        if (seed, batch_seed, k, max_norm) not in ACCUM:
            raise
        blobs, norms = ACCUM[seed, batch_seed, k, max_norm]
        shapes = [p.shape for p in model.parameters()]
        params = [_tensor(b, s) for b, s in zip(blobs, shapes, strict=True)]
        return {"params": params, "norms": [torch.tensor(n) for n in norms]}


def _blobs(params: list[torch.Tensor]) -> list[str]:
    return [base64.b64encode(p.detach().float().contiguous().numpy().tobytes()).decode()
            for p in params]  # fmt: skip


def shipped_source(step_seed: int, accum_seed: int, k: int, accum_norms: tuple) -> str:
    """shipped_steps.py for the notebook's specimens, from the references."""
    steps, accum = [], []
    for max_norm in MAX_NORMS:
        params, norm = expected_steps(step_seed, step_seed + 1, max_norm)
        steps.append(
            f"    ({step_seed}, {step_seed + 1}, {max_norm!r}): ({_blobs(params)!r}, {norm!r}),"
        )
    for max_norm in accum_norms:
        run = expected_whole_batch(accum_seed, accum_seed + 1, k, max_norm)
        norms = [float(n) for n in run["norms"]]
        key = (accum_seed, accum_seed + 1, k, float(max_norm))
        accum.append(f"    {key!r}: ({_blobs(run['params'])!r}, {norms!r}),")
    return (
        '"""Written by `course release` from the reference steps (course_utils/lessons/clipping/'
        'expected.py): float32 parameters, base64, after two clipped steps; and the norms."""\n\n'
        "STEPS = {\n" + "\n".join(steps) + "\n}\n\nACCUM = {\n" + "\n".join(accum) + "\n}\n"
    )


def write_shipped(package: Path) -> Path:
    """Write shipped_steps.py into the edition's copy of this package (`package`: its
    course_utils folder), for the specimens a notebook's checks use."""
    from .accum_check import ACCUM_K, ACCUM_SEEDS
    from .checks import STEP_SEEDS, THRESHOLDS

    norms = (THRESHOLDS["accum_acts"].value, THRESHOLDS["accum_idle"].value)
    path = Path(package) / "lessons" / "clipping" / SHIPPED
    path.write_text(shipped_source(STEP_SEEDS[0], ACCUM_SEEDS[0], ACCUM_K[0], norms), "utf-8")
    return path
