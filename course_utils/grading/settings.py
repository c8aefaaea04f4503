"""What decides a grade besides the submission: the run settings, the solutions, the harness
code, the device class and torch. Their fingerprint lets a rerun reuse unchanged grades."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

HARNESS = Path(__file__).resolve().parents[1]  # course_utils/


@dataclass(frozen=True)
class RunSettings:
    """How each notebook is run: part of every reuse fingerprint."""

    cell_timeout: float
    notebook_timeout: float
    quick: bool
    checks_only: bool = False
    isolation: str = "auto"  # course_utils.grading.sandbox.LEVELS

    def tag(self) -> str:
        # notebook_timeout is left out (as before): it ends hangs, it does not change grades.
        # Unisolated runs never share grades with isolated ones: their kernels could be tampered
        tag = f"{self.cell_timeout}|{self.quick}" + ("|checks-only" if self.checks_only else "")
        return tag + ("|unisolated" if self.isolation == "none" else "")


def fingerprint(data: bytes, settings: str) -> str:
    """Same submission, same settings: the grades can be reused."""
    return hashlib.sha256(data + settings.encode()).hexdigest()


def solutions_digest(sol_paths: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in sol_paths:
        digest.update(path.read_bytes())
    return digest.hexdigest()


def harness_digest(harness: Path = HARNESS) -> str:
    """Every file of the harness folder, bytecode included: what the judge imports, and what
    the kernel's answer-free harness is built from. Compiled first where it can be, so a
    first import during the run does not change what the next run sees."""
    import compileall

    compileall.compile_dir(str(harness), quiet=2)  # a read-only install: nothing written
    digest = hashlib.sha256()
    for path in sorted(p for p in harness.rglob("*") if p.is_file()):
        digest.update(path.relative_to(harness).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()


def packages_digest() -> str:
    """The environment's package set (name and version of every installed distribution)."""
    from importlib import metadata

    names = sorted(f"{d.metadata.get('Name', '?')}=={d.version}" for d in metadata.distributions())
    return hashlib.sha256("\n".join(names).encode()).hexdigest()


def machine_settings(harness: Path = HARNESS) -> str:
    """What the grading machine contributes to a fingerprint: the harness folder (check bodies,
    thresholds; bytecode too), the installed packages, the device class and the torch
    version. Computed where the notebook runs (a Dask worker, a shard's node), never assumed
    from the client."""
    import torch  # only when grading: `course --help` and `course assign` start without it

    from .. import device

    return (
        f"{harness_digest(harness)}|{device.device_class()}|{torch.__version__}|{packages_digest()}"
    )


def device_class_of(machine: str) -> str:
    return machine.split("|")[1]


def settings_string(sol_digest: str, machine: str, run_tag: str) -> str:
    return f"{sol_digest}|{machine}|{run_tag}"


def grading_settings(
    sol_paths: list[Path],
    cell_timeout: float,
    quick: bool,
    *,
    harness: Path = HARNESS,
    checks_only: bool = False,
) -> str:
    """Everything besides the submission that decides its grades: the solution notebooks
    (locked checks), the harness's own code, the device class and torch version, and the run
    settings. A change to any of them invalidates reused grades."""
    run = RunSettings(cell_timeout, 0, quick, checks_only)
    return settings_string(solutions_digest(sol_paths), machine_settings(harness), run.tag())


def gpu_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0
