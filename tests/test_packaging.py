"""Packaging: environment.yml and pyproject.toml ask for the same dependencies, the repository
URL the notebooks install from is the project's, and `course` runs course_utils.cli:main."""

from __future__ import annotations

import re
import sys
from importlib import metadata
from pathlib import Path

import pytest

from course_utils import authoring

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    tomllib = pytest.importorskip("tomli")

yaml = pytest.importorskip("yaml")

ROOT = Path(__file__).resolve().parents[1]
OPTIONAL_EXTRAS = {"airbench"}  # extras nothing in the README's commands or the tests needs
REQUIREMENT = re.compile(  # a lower bound, and an upper one where a release breaks us
    r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*"
    r"(?:>=\s*([0-9][0-9A-Za-z.]*)(?:\s*,\s*<\s*[0-9][0-9A-Za-z.]*)?)?\s*$"
)


@pytest.fixture(scope="module")
def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def environment() -> dict:
    return yaml.safe_load((ROOT / "environment.yml").read_text(encoding="utf-8"))


def lower_bounds(requirements: list[str]) -> dict[str, str | None]:
    """{normalised name: lower bound or None} of requirement strings like 'torch>=2.4' (or
    'sphinx>=7,<11'); the whole text must match in both files, upper bound included."""
    bounds = {}
    for text in requirements:
        match = REQUIREMENT.match(text)
        assert match, f"cannot read requirement {text!r} (expected 'name' or 'name>=version')"
        name = re.sub(r"[-_.]+", "-", match[1]).lower()
        assert name not in bounds, f"{name} listed twice"
        bounds[name] = text.strip()[len(match[1]) :].strip() or None
    return bounds


def environment_pip_list(environment: dict) -> list[str]:
    [pip] = [d["pip"] for d in environment["dependencies"] if isinstance(d, dict) and "pip" in d]
    return pip


def test_environment_yml_pip_list_equals_pyproject_dependencies_and_dev_extras(
    pyproject, environment
):
    project = pyproject["project"]
    extras = project["optional-dependencies"]
    installed = {k: v for k, v in extras.items() if k not in OPTIONAL_EXTRAS}
    everything = project["dependencies"] + [r for reqs in installed.values() for r in reqs]
    wanted = lower_bounds([r for r in everything if not r.startswith(project["name"])])
    pip = [r for r in environment_pip_list(environment) if not r.startswith("-e")]
    assert lower_bounds(pip) == wanted


def test_environment_yml_installs_the_project_itself(environment):
    assert "-e ." in environment_pip_list(environment)


def test_environment_yml_python_matches_requires_python(pyproject, environment):
    pythons = [
        d for d in environment["dependencies"] if isinstance(d, str) and d.startswith("python")
    ]
    assert pythons == ["python" + pyproject["project"]["requires-python"]]


def test_project_urls_hold_the_repository_the_notebooks_install_from(pyproject):
    assert authoring.REPOSITORY in pyproject["project"]["urls"].values()
    assert f"git+{authoring.REPOSITORY}" in authoring.setup_cell(None).source
    assert authoring.REPOSITORY.split("github.com/")[1] in authoring.colab_badge(
        "00_measuring.ipynb"
    )


def test_console_script_course_points_at_the_cli_main(pyproject):
    assert pyproject["project"]["scripts"]["course"] == "course_utils.cli:main"


def test_installed_course_command_loads_the_cli_main():
    from course_utils.cli import main

    [script] = [e for e in metadata.entry_points(group="console_scripts") if e.name == "course"]
    assert script.value == "course_utils.cli:main"
    assert script.load() is main


def test_dev_extra_brings_every_other_extra(pyproject):
    """`pip install -e ".[dev]"` is the README's one install: it must bring the tools and lab."""
    project = pyproject["project"]
    others = set(project["optional-dependencies"]) - {"dev"} - OPTIONAL_EXTRAS
    selves = [r for r in project["optional-dependencies"]["dev"] if r.startswith(project["name"])]
    assert [set(r.split("[")[1].rstrip("]").split(",")) for r in selves] == [others]


def test_notebook_runtime_needs_no_jupyter_or_grading_packages(pyproject):
    """Colab installs the bare project: nothing of the instructor's tools."""
    names = set(lower_bounds(pyproject["project"]["dependencies"]))
    assert not names & {"jupyterlab", "papermill", "nbval", "nbclient", "nbformat", "nbgrader"}


def test_course_help_starts_without_importing_torch():
    import subprocess

    code = (
        "import sys; import course_utils.cli as c; c.build_parser(); print('torch' in sys.modules)"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "False"


def test_the_torch_floor_is_the_newest_release_a_lesson_needs(pyproject):
    """Issue 34: `torch>=2.4` promised lessons that need 2.6 (13's fully_shard) and 2.5 (12's
    FlexAttention). compat.NEEDS says which lesson needs which release; the floor is the
    newest of them, and torchvision's floor is the release built for it."""
    from course_utils import compat

    newest = max(compat.NEEDS, key=compat._release)
    assert compat.TORCH_FLOOR == newest
    bounds = lower_bounds(pyproject["project"]["dependencies"])
    assert bounds["torch"] == f">={compat.TORCH_FLOOR}"
    assert bounds["torchvision"] == ">=" + compat.torchvision_for(compat.TORCH_FLOOR).rstrip(".*")


def test_the_installed_torch_meets_the_floor():
    import torch

    from course_utils import compat

    assert compat.below_floor(torch.__version__) == []


def test_a_torch_below_the_floor_is_told_what_will_not_run():
    from course_utils import compat

    assert compat.below_floor("2.6.0+cu124") == []
    older = compat.below_floor("2.4.1")
    assert len(older) == 2 and "lesson 13" in older[0] and "FlexAttention" in older[1]
    assert compat.below_floor("2.5.0") == [compat.NEEDS["2.6"]]
