"""The grading kernel's harness (course_utils.grading.kernel_harness): the learner's code can
import nothing from it that computes an answer (references, check bodies, the lesson's answers
under other names), and everything a probe needs is still there."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from course_utils.checks import LEGACY
from course_utils.grading import kernel_harness
from course_utils.withholding import is_answer


@pytest.fixture(scope="module")
def harness(tmp_path_factory) -> Path:
    return kernel_harness.build("measuring", tmp_path_factory.mktemp("kernel-harness"))


def _modules(root: Path, under: str = ""):
    for path in sorted((root / "course_utils" / under).rglob("*.py")):
        yield path, ast.parse(path.read_text(encoding="utf-8"))


def test_no_reference_answer_and_no_grader_is_left(harness):
    assert not (harness / "course_utils" / "grading").exists()
    for path, tree in _modules(harness, "lessons"):  # where the answers live
        defined = [
            n.name
            for n in tree.body
            if isinstance(n, ast.FunctionDef | ast.ClassDef) and is_answer(n.name)
        ]
        assert not defined, f"{path}: {defined}"


def test_every_judged_checks_body_is_gone(harness):
    for path, tree in _modules(harness):
        for node in tree.body:
            if kernel_harness._is_check(node) and kernel_harness._check_id(node) not in LEGACY:
                source = ast.unparse(node.body[0])
                assert len(node.body) == 1 and "decided by the judge" in source, path


def test_the_lessons_answers_under_other_names_are_withheld(harness, tmp_path):
    memory = (harness / "course_utils" / "memory.py").read_text(encoding="utf-8")
    assert 'activation_bytes = withheld("activation_bytes", ' in memory
    other = kernel_harness.build("one_cycle", tmp_path)  # another lesson's kernel keeps it
    assert "def activation_bytes(" in (other / "course_utils" / "memory.py").read_text()


def test_the_harness_is_compiled_and_read_only_to_others(harness):
    assert list((harness / "course_utils").rglob("*.pyc"))
    mode = os.stat(harness / "course_utils" / "checks.py").st_mode & 0o777
    assert mode == 0o644


LIST_PROBES = """
import importlib, json, pkgutil
import course_utils.lessons as lessons
from course_utils.probes import PROBES
for m in pkgutil.iter_modules(lessons.__path__):
    importlib.import_module(f"course_utils.lessons.{m.name}")
print(json.dumps(sorted(PROBES)))
"""


def _probes(python_path: str) -> list[str]:
    env = {**os.environ, "PYTHONPATH": python_path}
    done = subprocess.run(
        [sys.executable, "-c", LIST_PROBES], env=env, capture_output=True, text=True, cwd="/"
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_every_lesson_imports_with_every_probe_a_check_may_ask_for(harness):
    full = str(Path(kernel_harness.__file__).resolve().parents[2])
    assert _probes(str(harness)) == _probes(full)
