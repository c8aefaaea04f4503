"""What two clipped steps must leave, where the reference step is not at hand.

08-clipped-step compares the learner's two steps with the reference's. The learner edition has
no `reference_clipped_step`, so that its self-check still says right or wrong, `course
release` runs the reference on the notebook's specimen (the first of checks.STEP_SEEDS) and
writes the parameters and norm it gives into shipped_steps.py, values and no code. The judge
of `course grade` draws other specimens too, and always has the reference; the grading
kernel's harness is built without the shipped file.
"""

from __future__ import annotations

import base64
from pathlib import Path

import torch

from ...errors import ReferenceWithheld
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


def shipped_source(seed: int) -> str:
    """shipped_steps.py for the specimen of `seed` (batches of seed + 1), from the reference."""
    rows = []
    for max_norm in MAX_NORMS:
        params, norm = expected_steps(seed, seed + 1, max_norm)
        blobs = [base64.b64encode(p.detach().float().contiguous().numpy().tobytes()).decode()
                 for p in params]  # fmt: skip
        rows.append(f"    ({seed}, {seed + 1}, {max_norm!r}): ({blobs!r}, {norm!r}),")
    return (
        '"""Written by `course release` from the reference step (course_utils/lessons/clipping/'
        'expected.py): float32 parameters, base64, after two clipped steps; and the norm."""\n\n'
        "STEPS = {\n" + "\n".join(rows) + "\n}\n"
    )


def write_shipped(package: Path, seed: int) -> Path:
    """Write shipped_steps.py into the edition's copy of this package (`package`: its
    course_utils folder)."""
    path = Path(package) / "lessons" / "clipping" / SHIPPED
    path.write_text(shipped_source(seed), encoding="utf-8")
    return path
