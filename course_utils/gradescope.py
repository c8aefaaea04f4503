"""`course export gradescope NN`: a Gradescope autograder that grades one notebook exactly as
`course grade` does, and `python -m course_utils.gradescope run`, its grading side.

The zip follows gradescope/autograder_samples (docs/specs.md): `setup.sh` and
`run_autograder` at its root; Gradescope unpacks it to /autograder/source, puts the upload in
/autograder/submission and reads /autograder/results/results.json. The zip ships the course
itself (course/, the version that made it) and the lesson's solution notebook, whose locked
check cells are restored into the upload by `grade_submission`, as `course grade` restores them.

Gradescope must never see "autograder failed": a results.json with a score and the reason is
written before grading starts (in case the run is stopped), after it (whatever happened to
the notebook), and by run_autograder itself should Python not start at all.
$COURSE_AUTOGRADER_ROOT replaces /autograder (tests), $COURSE_AUTOGRADER_PYTHON the Python.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import re
import subprocess
import sys
import time
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path

from .authoring import check_cells, read
from .errors import UsageError
from .feedback import explain
from .grading import HARNESS, RunSettings, grade_submission
from .mode import UNTIMED_PLATFORMS
from .protocol import NOT_APPLICABLE, PASSED
from .records import Row, Submission

ROOT_ENV, PYTHON_ENV = "COURSE_AUTOGRADER_ROOT", "COURSE_AUTOGRADER_PYTHON"
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
/autograder/venv/bin/python -c "import torch, papermill, course_utils.gradescope; \\
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
"$PYTHON" -m course_utils.gradescope run --root "$ROOT"
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


# --- the grading side: run inside Gradescope's container ----------------------------------


def find_uploads(folder: Path) -> list[Path]:
    """Every notebook uploaded, at any depth, skipping hidden folders (.ipynb_checkpoints)
    and macOS's __MACOSX copies."""
    if not folder.is_dir():
        return []
    return sorted(
        p
        for p in folder.rglob("*.ipynb")
        if not any(
            part.startswith(".") or part == "__MACOSX" for part in p.relative_to(folder).parts
        )
    )


def _test(r: Row, notes: dict[str, str]) -> dict:
    """One Gradescope test for one check: its points, the check's own explanation."""
    applicable = r.status != NOT_APPLICABLE
    lead = [] if applicable else ["**Not applicable here** (not counted):", ""]
    return {
        "name": r.check,
        "score": r.points,
        "max_score": r.max_points if applicable else 0.0,
        "status": "passed" if r.status in (PASSED, NOT_APPLICABLE) else "failed",
        "output": "\n".join(lead + explain(r, notes)),
        "output_format": "md",
        "extra_data": {
            "status": r.status,
            "value": r.value,
            "threshold": r.threshold,
            "device_class": r.device_class,
        },
    }


def _unrun(checks: dict[str, float], why: str) -> list[dict]:
    """Every check at 0 of its points, when the notebook could not be graded at all."""
    return [
        {
            "name": cid,
            "score": 0.0,
            "max_score": points,
            "status": "failed",
            "output": f"Not graded: {why}",
            "output_format": "md",
            "extra_data": {
                "status": "not-graded",
                "value": None,
                "threshold": None,
                "device_class": "",
            },
        }
        for cid, points in checks.items()
    ]


def _results(
    config: AutograderConfig | None, tests: list[dict], summary: str, started: float
) -> dict:
    extra = {"platform": "gradescope"}
    if config is not None:
        extra |= {k: getattr(config, k) for k in ("lesson", "quick", "course_version", "commit")}
        extra["speed_graded"] = config.grade_speed
    return {
        "score": sum(t["score"] for t in tests),
        "execution_time": round(time.monotonic() - started),
        "output": summary,
        "output_format": "md",
        "stdout_visibility": "hidden",
        "extra_data": extra,
        "tests": tests,
    }


def _finite(value):
    """JSON that strict parsers accept: inf and nan (a timer's ratio, say) become strings."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def write_results(results: dict, path: Path) -> None:
    """Whole or not at all: a kill mid-write leaves the previous file, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(_finite(results), indent=1, allow_nan=False), encoding="utf-8")
    tmp.replace(path)


@contextlib.contextmanager
def _grading_env(config: AutograderConfig):
    """The kernel's environment: no timing graded (unless asked), the offline data set."""
    saved = dict(os.environ)
    if not config.grade_speed:
        os.environ["COURSE_PLATFORM"] = "gradescope"
    os.environ.setdefault("COURSE_DATASET", "offline")
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _summary(rows: list[Row], config: AutograderConfig, earned: float, possible: float) -> str:
    device = next((r.device_class for r in rows if r.device_class), "unknown")
    lines = [
        f"**{config.lesson}: {earned:g} / {possible:g} points**, graded on Gradescope "
        f"(a `{device}` device, {'quick' if config.quick else 'full'} mode)."
    ]
    untimed = [
        f"{r.check} ({p['name']})"
        for r in rows
        for p in r.parts
        if p["status"] == NOT_APPLICABLE and UNTIMED_PLATFORMS["gradescope"] in p["message"]
    ]
    if untimed:
        lines.append(
            f"Measured and shown here, not graded: {', '.join(untimed)}. "
            f"{UNTIMED_PLATFORMS['gradescope'][0].upper()}{UNTIMED_PLATFORMS['gradescope'][1:]}."
        )
    if any(r.status == NOT_APPLICABLE for r in rows):
        lines.append("A check that is *not applicable* here counts for nothing, against no one.")
    stopped = [r.check for r in rows if r.status in ("missing", "timeout")]
    if stopped:
        lines.append(
            f"{len(stopped)} check(s) did not finish ({', '.join(stopped)}): each says why."
        )
    return "\n\n".join(lines)


def _upload_problem(folder: Path, uploads: list[Path], lesson: str) -> str:
    """Why there is no single notebook to grade: none, or several, named."""
    if uploads:
        names = ", ".join(p.relative_to(folder).as_posix() for p in uploads)
        return (
            f"your submission has {len(uploads)} notebooks ({names}): upload only your copy of "
            f"`{lesson}.ipynb`, so that it is clear which one to grade"
        )
    files = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    return (
        f"no notebook (.ipynb) in your submission (received: {', '.join(files[:10]) or 'nothing'})"
        f": upload your copy of `{lesson}.ipynb` (any file name)"
    )


def grade_upload(root: Path, config: AutograderConfig, checks: dict[str, float], started: float):
    """Find the one uploaded notebook and grade it with `grade_submission`, as `course grade`
    does."""
    folder = root / "submission"
    uploads = find_uploads(folder)
    if len(uploads) != 1:
        why = _upload_problem(folder, uploads, config.lesson)
        return _results(config, _unrun(checks, why), f"**Not graded**: {why}.", started)
    sub = Submission(uploads[0], uploads[0].relative_to(folder).as_posix())
    solution = read(root / "source" / "solutions" / f"{config.lesson}.ipynb")
    run = RunSettings(config.cell_timeout, config.notebook_timeout, config.quick)
    with _grading_env(config):
        graded = grade_submission(
            sub.name, sub.path.name, sub.path.read_bytes(), {config.lesson: solution}, run
        )
    rows, notes = graded.rows, graded.notes
    if len(rows) == 1 and not rows[0].check:  # unreadable, or not this lesson's notebook
        why = f"{rows[0].message} (this assignment grades `{config.lesson}.ipynb`)"
        return _results(config, _unrun(checks, why), f"**Not graded**: {why}.", started)
    tests = [_test(r, notes) for r in rows]
    earned, possible = sum(t["score"] for t in tests), sum(t["max_score"] for t in tests)
    return _results(config, tests, _summary(rows, config, earned, possible), started)


def run(root: Path) -> dict:
    """Grade /autograder/submission into /autograder/results/results.json, whatever happens."""
    started = time.monotonic()
    out = root / "results" / "results.json"
    try:
        config = AutograderConfig(**json.loads((root / "source" / CONFIG).read_text()))
        checks = points_per_check(root / "source" / "solutions" / f"{config.lesson}.ipynb")
    except Exception as exc:  # a broken zip: the instructor's to fix, said to everyone
        why = f"the autograder is broken ({type(exc).__name__}: {exc}); please tell your instructor"
        results = _results(None, [], f"**Not graded**: {why}.", started)
        write_results(results, out)
        return results
    stopped = (
        "the grader was stopped before it finished (past Gradescope's time limit, "
        f"{config.time_limit_minutes} min, or its memory limit)"
    )
    unfinished = _results(config, _unrun(checks, stopped), f"**Not graded**: {stopped}.", started)
    write_results(unfinished, out)  # what Gradescope reads if this run is stopped
    try:
        results = grade_upload(root, config, checks, started)
    except Exception as exc:  # the grader's own failure must still reach the learner
        why = f"the grader failed ({type(exc).__name__}: {str(exc)[:200]}); tell your instructor"
        results = _results(config, _unrun(checks, why), f"**Not graded**: {why}.", started)
    write_results(results, out)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_utils.gradescope")
    parser.add_argument("command", choices=["run"])
    parser.add_argument("--root", type=Path, default=Path(os.environ.get(ROOT_ENV, "/autograder")))
    args = parser.parse_args(argv)
    results = run(args.root)
    print(results["output"])  # the autograder's stdout: for the instructor
    for t in results["tests"]:
        print(f"{t['name']}: {t['score']:g}/{t['max_score']:g} {t['extra_data']['status']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
