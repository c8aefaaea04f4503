"""`course export gradescope NN`: a Gradescope autograder that grades one notebook exactly as
`course grade` does; its grading side, run inside Gradescope, is `course_utils.grading.autograder`.

The zip follows gradescope/autograder_samples (docs/specs.md): `setup.sh` and
`run_autograder` at its root; Gradescope unpacks it to /autograder/source, puts the upload in
/autograder/submission and reads /autograder/results/results.json. The zip ships the course
itself (course/, the version that made it) and the lesson's solution notebook, whose locked
check cells are restored into the upload by `grade_submission`, as `course grade` restores them.

What the exporting machine used travels with it (autograder.json `versions`): setup.sh
installs torch and torchvision of the same minor release (from $COURSE_TORCH_INDEX, default
`--torch-index`) and everything else the course's [tools] extra needs at the exporter's exact
versions (constraints.txt: the whole requirement closure installed here, walked with
importlib.metadata). Before pip it probes both indexes (probe_indexes.py, 10 s), so a build
without a route to one fails in seconds with the reason, not after pip's minutes of retries.

Visibility (`--visibility`): Gradescope sets it per test, so each check is two tests. `NN-check`
is always visible: its score and a one-line status. `NN-check: details` (0 points) carries the
check's messages and hint at the chosen visibility. A submission that is not run at all (no
notebook, unreadable, another lesson's, forged) says why in visible tests: that reason is about
the upload, not a hint.
"""

from __future__ import annotations

import json
import platform
import re
import subprocess
import zipfile
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path

from ..authoring import check_cells, read
from ..errors import UsageError
from .settings import HARNESS

CONFIG = "autograder.json"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
# Gradescope's test visibilities (docs/specs.md), and the one `--visibility` defaults to
VISIBILITIES = ("hidden", "after_due_date", "after_published", "visible")
DEFAULT_VISIBILITY = "after_due_date"
# Gradescope's longest autograder timeout is 40 minutes (docs/troubleshooting.md); the run
# stops the notebook this long before it, to leave time to start and to write the results.
MARGIN_S = 180
# installed from the torch index at the exporter's minor release, not pinned exactly: the
# index serves builds (+cpu, +cu130) of the same version that differ from the exporter's
TORCH_FAMILY = ("torch", "torchvision")
# stdlib only (the image's python3 runs it before any venv exists), shipped in the zip as is
PROBE_INDEXES = Path(__file__).with_name("probe_indexes.py")

SETUP_SH = """#!/usr/bin/env bash
# Gradescope runs this once, as root, when it builds the autograder (Ubuntu base image).
# Into /autograder/venv it installs what the exporting machine used (autograder.json
# `versions`): Python @PYTHON_MINOR@ where the image has it (the exporter's: @PYTHON@);
# @TORCH_PINS@ from $COURSE_TORCH_INDEX, by default
#   @TORCH_INDEX@
# then the course shipped in this zip (course/) with its notebook tools, every other package
# pinned to the exporter's version (constraints.txt).
# `setup.sh --probe-only` only checks that both indexes answer (the tests run it).
# Written by `course export gradescope`.
set -euo pipefail
SOURCE="${COURSE_AUTOGRADER_ROOT:-/autograder}/source"
TORCH_INDEX="${COURSE_TORCH_INDEX:-@TORCH_INDEX@}"
TORCH_INDEX="${TORCH_INDEX%/}"
PYPI_INDEX="${PIP_INDEX_URL:-https://pypi.org/simple}"
PYPI_INDEX="${PYPI_INDEX%/}"
cd "$SOURCE"

probe_indexes() {  # seconds, not pip's minutes, to fail a build with no route to an index
  python3 probe_indexes.py "$TORCH_INDEX/torch/" "$PYPI_INDEX/pip/"
}
if [ "${1:-}" = "--probe-only" ]; then
  probe_indexes
  exit
fi

apt-get update
export DEBIAN_FRONTEND=noninteractive
apt-get install -y python3 python3-venv python3-pip
# the learner's kernel runs in a bubblewrap sandbox where the container allows one; else as a
# grading user (course_utils/grading/sandbox.py): the log of each run says which
apt-get install -y bubblewrap || echo "setup.sh: no bubblewrap; a grading user isolates" >&2
PY=python@PYTHON_MINOR@  # the exporter's; the pins below were resolved for it
if ! apt-get install -y "$PY" "$PY-venv"; then
  echo "setup.sh: this image has no $PY (the exporter's); using $(python3 --version)." \\
    "Should pip find no pinned version below, choose a base image with $PY or export" \\
    "from a Python like this one." >&2
  PY=python3
fi
probe_indexes
"$PY" -m venv /autograder/venv
PIP=(/autograder/venv/bin/python -m pip --timeout 10 --retries 1)
"${PIP[@]}" install --upgrade pip
"${PIP[@]}" install --index-url "$TORCH_INDEX" @TORCH_ARGS@
"${PIP[@]}" install --index-url "$PYPI_INDEX" -c constraints.txt "./course[tools]"
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
    visibility: str = DEFAULT_VISIBILITY  # of each check's messages and hint; scores: visible
    # the exporter's python, torch, torchvision and {package: version} of constraints.txt
    versions: dict = field(default_factory=dict)


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
        v = c.versions
        return (
            f"wrote {self.path}: Gradescope autograder for {c.lesson} "
            f"({len(self.checks)} checks, {sum(self.checks.values()):g} points, "
            f"{'quick' if c.quick else 'full'} mode, {speed}, details {c.visibility}; "
            f"Python {v['python']}, torch {v['torch']}, {len(v['pinned'])} packages pinned). "
            f"On Gradescope: upload it under Configure Autograder, set the timeout to "
            f"{c.time_limit_minutes} min and the memory well above the 768 MB default (torch "
            "and a notebook kernel need more)."
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


def _public(version: str) -> str:
    """2.14.1+cu130 -> 2.14.1: a local build label names no release an index could serve."""
    return version.split("+", 1)[0]


def _minor(version: str) -> str:
    """2.14.1+cu130 -> 2.14.*: any build of the same minor release."""
    return ".".join(_public(version).split(".")[:2]) + ".*"


def requirement_closure(dist: str, extras: tuple[str, ...]) -> dict[str, str]:
    """{name: version} of every installed distribution that `dist[extras]` needs here, itself
    included; a requirement not installed here (a marker for another platform) is skipped."""
    from packaging.requirements import Requirement  # with pytest, in the course's [check]
    from packaging.utils import canonicalize_name

    found: dict[str, str] = {}
    todo, seen = [(dist, frozenset(extras))], set()
    while todo:
        name, wanted = todo.pop()
        if (canonicalize_name(name), wanted) in seen:
            continue
        seen.add((canonicalize_name(name), wanted))
        try:
            installed = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        found[canonicalize_name(installed.metadata["Name"])] = installed.version
        for text in installed.requires or []:
            req = Requirement(text)
            if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in {"", *wanted}):
                todo.append((req.name, frozenset(req.extras)))
    return found


def exporter_versions() -> dict:
    """Python, torch, torchvision and the exact pins of constraints.txt: the installed course's
    [tools] closure, what this machine grades with. From a CUDA torch it keeps nvidia-* and
    triton too: constraints, which a CPU torch never installs."""
    dists = metadata.packages_distributions().get(HARNESS.name, [])
    if not dists:
        raise UsageError("the course is not installed here: pip install -e '.[tools]' first")
    closure = requirement_closure(dists[0], ("tools",))
    missing = [name for name in TORCH_FAMILY if name not in closure]
    if missing:
        raise UsageError(f"{', '.join(missing)} not installed here: export from the course's env")
    pinned = {
        name: _public(version)
        for name, version in sorted(closure.items())
        if name not in (*TORCH_FAMILY, dists[0])
    }
    return {
        "python": platform.python_version(),
        **{name: closure[name] for name in TORCH_FAMILY},
        "pinned": pinned,
    }


def constraints(versions: dict) -> str:
    """constraints.txt: torch and torchvision to their minor release, the rest exactly."""
    lines = [f"{name}=={_minor(versions[name])}" for name in TORCH_FAMILY]
    lines += [f"{name}=={version}" for name, version in versions["pinned"].items()]
    return (
        "# the exporter's versions; written by `course export gradescope`\n"
        + "\n".join(lines)
        + "\n"
    )


def setup_sh(versions: dict, torch_index: str) -> str:
    """setup.sh for these versions and this torch index (@NAME@ marks, as the script is bash)."""
    torch_args = " ".join(f'"{name}=={_minor(versions[name])}"' for name in TORCH_FAMILY)
    fill = {
        "@PYTHON@": versions["python"],
        "@PYTHON_MINOR@": ".".join(versions["python"].split(".")[:2]),
        "@TORCH_PINS@": " and ".join(f"{n} {_minor(versions[n])}" for n in TORCH_FAMILY),
        "@TORCH_INDEX@": torch_index,
        "@TORCH_ARGS@": torch_args,
    }
    return re.sub(r"@[A-Z_]+@", lambda m: fill[m[0]], SETUP_SH)


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
    visibility: str = DEFAULT_VISIBILITY,
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
    if visibility not in VISIBILITIES:
        raise UsageError(f"--visibility: one of {', '.join(VISIBILITIES)}, not {visibility!r}")
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
        visibility=visibility,
        versions=exporter_versions(),
    )
    out = Path(out or f"autograder_{lesson.split('_')[0]}.zip")
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w") as zf:
        _add(zf, "setup.sh", setup_sh(config.versions, torch_index).encode(), executable=True)
        _add(zf, "probe_indexes.py", PROBE_INDEXES.read_bytes())
        _add(zf, "constraints.txt", constraints(config.versions).encode())
        _add(zf, "run_autograder", RUN_AUTOGRADER.encode(), executable=True)
        _add(zf, CONFIG, json.dumps(asdict(config), indent=1).encode())
        _add(zf, f"solutions/{sol_path.name}", sol_path.read_bytes())
        for name in ("pyproject.toml", "README.md"):
            _add(zf, f"course/{name}", (course / name).read_bytes())
        for path in sorted(HARNESS.rglob("*.py")):
            if "__pycache__" not in path.parts:
                _add(zf, f"course/{path.relative_to(course).as_posix()}", path.read_bytes())
    return ExportSummary(out, config, checks)
