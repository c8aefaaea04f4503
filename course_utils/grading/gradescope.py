"""`course export gradescope NN`: a Gradescope autograder that grades one notebook exactly as
`course grade` does; its grading side, run inside Gradescope, is `course_utils.grading.autograder`.

The zip follows gradescope/autograder_samples (docs/specs.md): `setup.sh` and
`run_autograder` at its root; Gradescope unpacks it to /autograder/source, puts the upload in
/autograder/submission and reads /autograder/results/results.json. The zip ships the course
itself (course/, the version that made it) and the lesson's solution notebook, whose locked
check cells are restored into the upload by `grade_submission`, as `course grade` restores them.
"""

from __future__ import annotations

import json
import re
import subprocess
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path

from ..authoring import check_cells, read
from ..errors import UsageError
from .settings import HARNESS

CONFIG = "autograder.json"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
# Gradescope's longest autograder timeout is 40 minutes (docs/troubleshooting.md); the run
# stops the notebook this long before it, to leave time to start and to write the results.
MARGIN_S = 180

SETUP_SH = """#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder (Ubuntu base image).
# It installs the course shipped in this zip (course/, the version that made the zip) with
# its notebook tools, and torch from {torch_index}, into /autograder/venv.
# Written by `course export gradescope`.
set -euo pipefail
SOURCE=/autograder/source
apt-get update
DEBIAN_FRONTEND=noninteractive apt-get install -y python3 python3-venv python3-pip
python3 -m venv /autograder/venv
PIP=/autograder/venv/bin/pip
"$PIP" install --upgrade pip
"$PIP" install --index-url {torch_index} torch torchvision
"$PIP" install "$SOURCE/course[tools]"
# fail the build here, not each learner's run: the grader, torch and the notebook kernel
/autograder/venv/bin/python -c "import torch, papermill, course_utils.grading.autograder; \\
from jupyter_client.kernelspec import KernelSpecManager; \\
KernelSpecManager().get_kernel_spec('python3'); print('course installed, torch', torch.__version__)"
"""

RUN_AUTOGRADER = """#!/usr/bin/env bash
# Gradescope runs this for each submission, in /autograder. Written by `course export
# gradescope`. It always leaves a valid results/results.json, even if Python cannot start.
ROOT="${COURSE_AUTOGRADER_ROOT:-/autograder}"
PYTHON="${COURSE_AUTOGRADER_PYTHON:-$ROOT/venv/bin/python}"
RESULTS="$ROOT/results/results.json"
mkdir -p "$ROOT/results"
cd "$ROOT"
"$PYTHON" -m course_utils.grading.autograder run --root "$ROOT"
if ! "$PYTHON" -c 'import json, sys; json.load(open(sys.argv[1]))' "$RESULTS" 2>/dev/null; then
  echo "run_autograder: the grader wrote no valid results.json; writing the fallback" >&2
  cat > "$RESULTS" <<'JSON'
{"score": 0, "output_format": "md", "stdout_visibility": "hidden", "tests": [],
 "output": "**Not graded**: the course's grader could not start (your instructor sees why in the autograder's output). Please tell your instructor."}
JSON
fi
exit 0
"""


@dataclass
class AutograderConfig:
    """What the zip grades and how: written by `export`, read by `run` (autograder.json)."""

    lesson: str
    quick: bool
    cell_timeout: float
    notebook_timeout: float
    time_limit_minutes: int
    grade_speed: bool  # False: timed parts are not-applicable ($COURSE_PLATFORM=gradescope)
    course_version: str
    commit: str


@dataclass
class ExportSummary:
    path: Path
    config: AutograderConfig
    checks: dict[str, float]

    def __str__(self) -> str:
        c = self.config
        speed = (
            "speed parts graded (raise Gradescope's CPU allocation)"
            if c.grade_speed
            else "speed parts reported as not applicable"
        )
        return (
            f"wrote {self.path}: Gradescope autograder for {c.lesson} "
            f"({len(self.checks)} checks, {sum(self.checks.values()):g} points, "
            f"{'quick' if c.quick else 'full'} mode, {speed}). On Gradescope: upload it under "
            f"Configure Autograder, set the timeout to {c.time_limit_minutes} min and the "
            "memory well above the 768 MB default (torch and a notebook kernel need more)."
        )


def find_lesson(lesson: str, solutions: Path) -> Path:
    """solutions/NN_*.ipynb for 'NN' (or a full stem); a clear error if none or several."""
    stem = lesson.removesuffix(".ipynb")
    found = sorted(p for p in solutions.glob("*.ipynb") if p.stem == stem)
    found = found or sorted(solutions.glob(f"{stem}_*.ipynb"))
    if len(found) != 1:
        known = ", ".join(p.stem for p in sorted(solutions.glob("*.ipynb"))) or "none"
        what = "no" if not found else "more than one"
        raise UsageError(
            f"{what} solution notebook matches {lesson!r} in {solutions} (known: {known})"
        )
    return found[0]


def points_per_check(solution: Path) -> dict[str, float]:
    """{check id: points} of a solution notebook, in notebook order."""
    return {
        cid: float(cell.metadata.get("nbgrader", {}).get("points", 1))
        for cid, (_, cell) in check_cells(read(solution), solution.stem).items()
    }


def _commit(repo: Path) -> str:
    """The course's git commit (+ 'with local changes' when the tree differs); '' outside git."""
    try:
        head = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(repo), "status", "--porcelain", "--", "course_utils", "solutions"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return ""
    return head + (" with local changes" if dirty else "")


def _version(pyproject: Path) -> str:
    """The version in the pyproject.toml the zip ships (no toml parser before Python 3.11)."""
    found = re.search(r'^version\s*=\s*"([^"]+)"', pyproject.read_text(), re.MULTILINE)
    return found[1] if found else "unknown"


def _add(zf: zipfile.ZipFile, name: str, data: bytes, *, executable: bool = False) -> None:
    """A file with fixed time and mode, so the same course makes the same zip."""
    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
    info.external_attr = (0o100755 if executable else 0o100644) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    zf.writestr(info, data)


def export(
    lesson: str,
    *,
    out: Path | None = None,
    solutions: Path = Path("solutions"),
    quick: bool = False,
    time_limit_minutes: int = 40,
    grade_speed: bool = False,
    torch_index: str = TORCH_CPU_INDEX,
) -> ExportSummary:
    """Write the autograder zip for one lesson; see the module docstring."""
    sol_path = find_lesson(lesson, Path(solutions))
    checks = points_per_check(sol_path)
    course = HARNESS.parent
    if not (course / "pyproject.toml").exists():
        raise UsageError(
            f"the course source is not next to {HARNESS}: export from a clone (pip install -e .)"
        )
    if not 2 <= time_limit_minutes <= 40:
        raise UsageError("--time-limit: Gradescope allows 2 to 40 minutes")
    notebook_timeout = time_limit_minutes * 60 - MARGIN_S
    config = AutograderConfig(
        lesson=sol_path.stem,
        quick=quick,
        cell_timeout=min(600.0, notebook_timeout),
        notebook_timeout=notebook_timeout,
        time_limit_minutes=time_limit_minutes,
        grade_speed=grade_speed,
        course_version=_version(course / "pyproject.toml"),
        commit=_commit(course),
    )
    out = Path(out or f"autograder_{lesson.split('_')[0]}.zip")
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w") as zf:
        _add(zf, "setup.sh", SETUP_SH.format(torch_index=torch_index).encode(), executable=True)
        _add(zf, "run_autograder", RUN_AUTOGRADER.encode(), executable=True)
        _add(zf, CONFIG, json.dumps(asdict(config), indent=1).encode())
        _add(zf, f"solutions/{sol_path.name}", sol_path.read_bytes())
        for name in ("pyproject.toml", "README.md"):
            _add(zf, f"course/{name}", (course / name).read_bytes())
        for path in sorted(HARNESS.rglob("*.py")):
            if "__pycache__" not in path.parts:
                _add(zf, f"course/{path.relative_to(course).as_posix()}", path.read_bytes())
    return ExportSummary(out, config, checks)
