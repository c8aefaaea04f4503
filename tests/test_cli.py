"""course_utils.cli: the `course` command parses, calls one library function, and maps errors
to its documented exit codes (0 done, 1 out of date, 2 usage, 3 malformed notebook).

grade and report are tested by patching the library function each calls and checking the
arguments it receives: no kernel is started.
"""

from __future__ import annotations

import json
import runpy
import sys
import types
from pathlib import Path

import pytest

from course_utils import device
from course_utils.authoring import check_code, code, md, new_notebook, write
from course_utils.cli import build_parser, main
from course_utils.errors import CourseError, UsageError


def course_folder(root: Path, *, broken: bool = False) -> Path:
    """solutions/ with one good notebook (and one with an unclosed marker if `broken`)."""
    solutions = root / "solutions"
    solutions.mkdir()
    good = new_notebook(
        [
            md("# Demo"),
            code("def f():\n    ### BEGIN SOLUTION\n    return 1\n    ### END SOLUTION"),
            check_code("demo-f", 1, "check(f)"),
        ],
        "01_demo.ipynb",
    )
    write(good, solutions / "01_demo.ipynb")
    if broken:
        bad = new_notebook(
            [md("# Broken"), code("def g():\n    ### BEGIN SOLUTION\n    return 2")],
            "02_broken.ipynb",
        )
        write(bad, solutions / "02_broken.ipynb")
    return root


def assign_args(root: Path, *extra: str) -> list[str]:
    return [
        "assign",
        "--solutions",
        str(root / "solutions"),
        "--notebooks",
        str(root / "notebooks"),
        *extra,
    ]


# --- env ------------------------------------------------------------------------------------------


def test_env_json_prints_the_device_class(capsys):
    assert main(["env", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["device_class"] == device.device_class()
    assert info["device"] == str(device.get_device())
    assert info["dataset"] == "offline"
    assert info["quick"] is True
    assert info["peak_flops"] is None or info["peak_flops"] > 0


def test_env_json_reports_a_faked_bf16_cpu(capsys, monkeypatch):
    monkeypatch.setenv("COURSE_DEVICE", "cpu")
    monkeypatch.setattr(device, "cpu_flags", lambda: {"avx512f", "amx_bf16"})
    assert main(["env", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["device_class"] == "cpu-bf16"


def test_env_without_json_prints_a_table(capsys):
    assert main(["env"]) == 0
    out = capsys.readouterr().out
    assert "device class:" in out and device.device_class() in out


# --- assign ---------------------------------------------------------------------------------------


def test_assign_check_exits_1_when_notebooks_are_out_of_date_and_0_after_assign(tmp_path, capsys):
    root = course_folder(tmp_path)
    assert main(assign_args(root, "--check")) == 1
    assert "out of date" in capsys.readouterr().out
    assert not (root / "notebooks").exists()

    assert main(assign_args(root)) == 0
    assert "wrote 1 notebook(s): 01_demo.ipynb" in capsys.readouterr().out
    assert (root / "notebooks" / "01_demo.ipynb").exists()

    assert main(assign_args(root, "--check")) == 0
    assert main(assign_args(root)) == 0
    assert "all up to date" in capsys.readouterr().out


def test_assign_of_a_malformed_solution_exits_3_naming_the_notebook(tmp_path, capsys):
    root = course_folder(tmp_path, broken=True)
    assert main(assign_args(root, "--check")) == 3
    err = capsys.readouterr().err
    assert "malformed notebook" in err
    assert "02_broken.ipynb" in err and "never closed" in err


# --- grade and report: the library call, checked without kernels -------------------------------


@pytest.fixture
def fake_library(monkeypatch):
    """Stand-ins for course_utils.grading and course_utils.report that record their calls."""
    calls: dict[str, dict] = {}

    def grade(paths, **kwargs):
        calls["grade"] = {"paths": paths, **kwargs}
        return "graded"

    def report(**kwargs):
        calls["report"] = kwargs
        return "reported"

    monkeypatch.setitem(sys.modules, "course_utils.grading", types.SimpleNamespace(grade=grade))
    monkeypatch.setitem(sys.modules, "course_utils.report", types.SimpleNamespace(report=report))
    return calls


def test_grade_passes_paths_and_options_to_the_grading_library(fake_library, capsys):
    argv = [
        "grade",
        "subs/alice.ipynb",
        "subs/others",
        "--out",
        "out",
        "--timeout",
        "30",
        "--quick",
        "--jobs",
        "2",
        "--solutions",
        "sol",
    ]
    assert main(argv) == 0
    assert fake_library["grade"] == {
        "paths": [Path("subs/alice.ipynb"), Path("subs/others")],
        "out": Path("out"),
        "solutions": Path("sol"),
        "cell_timeout": 30.0,
        "quick": True,
        "jobs": 2,
        "checks_only": False,
        "dask": None,
        "shard": None,
        "allow_mixed_devices": False,
        "lesson": None,
        "isolation": "auto",
    }
    assert "graded" in capsys.readouterr().out


def test_grade_defaults(fake_library):
    assert main(["grade", "submissions"]) == 0
    assert fake_library["grade"] == {
        "paths": [Path("submissions")],
        "out": Path("grades"),
        "solutions": Path("solutions"),
        "cell_timeout": 600.0,
        "quick": False,
        "jobs": 1,
        "checks_only": False,
        "dask": None,
        "shard": None,
        "allow_mixed_devices": False,
        "lesson": None,
        "isolation": "auto",
    }


def test_grade_passes_the_class_options(fake_library):
    argv = ["grade", "subs", "--dask", "local:2", "--checks-only", "--allow-mixed-devices"]
    assert main(argv) == 0
    got = fake_library["grade"]
    assert (got["dask"], got["checks_only"], got["allow_mixed_devices"]) == ("local:2", True, True)
    assert main(["grade", "subs", "--shard", "1/3"]) == 0
    assert fake_library["grade"]["shard"] == "1/3"
    assert main(["grade", "subs", "--isolation", "none"]) == 0
    assert fake_library["grade"]["isolation"] == "none"


def test_grade_refuses_dask_with_shard_or_jobs(fake_library, capsys):
    assert main(["grade", "subs", "--dask", "local:2", "--shard", "0/2"]) == 2
    assert main(["grade", "subs", "--dask", "local:2", "--jobs", "2"]) == 2
    assert "grade" not in fake_library
    assert "choose one" in capsys.readouterr().err


def test_grade_merge_needs_exactly_its_folder(capsys):
    assert main(["grade", "merge", "a", "b"]) == 2
    assert "usage: course grade merge OUT" in capsys.readouterr().err


def test_grade_needs_at_least_one_path(capsys):
    with pytest.raises(SystemExit) as info:
        main(["grade"])
    assert info.value.code == 2


def test_report_passes_its_options_to_the_report_library(fake_library, capsys):
    assert (
        main(["report", "--quick", "--out", "rep", "--timeout", "120", "--solutions", "sol"]) == 0
    )
    assert fake_library["report"] == {
        "solutions": Path("sol"),
        "out": Path("rep"),
        "quick": True,
        "timeout": 120.0,
        "only": None,
        "reference": None,
    }
    assert "reported" in capsys.readouterr().out


def test_report_only_and_reference_reach_the_library(fake_library):
    assert main(["report", "--only", "04, 05", "--reference"]) == 0
    assert fake_library["report"]["only"] == ["04", "05"]
    assert fake_library["report"]["reference"] == Path("docs/results")


def test_report_exits_1_when_a_check_did_not_pass(fake_library, monkeypatch):
    import types as t

    failing = t.SimpleNamespace(ok=False, summary=lambda: "1/2 checks passed")
    monkeypatch.setitem(
        sys.modules, "course_utils.report", t.SimpleNamespace(report=lambda **kw: failing)
    )
    assert main(["report"]) == 1


def test_report_defaults(fake_library):
    assert main(["report"]) == 0
    assert fake_library["report"] == {
        "solutions": Path("solutions"),
        "out": Path("report"),
        "quick": False,
        "timeout": 900.0,
        "only": None,
        "reference": None,
    }


@pytest.mark.parametrize(
    ("error", "code"), [(UsageError("no notebooks in subs"), 2), (CourseError("broken"), 2)]
)
def test_known_errors_map_to_exit_codes(monkeypatch, capsys, error, code):
    def grade(paths, **kwargs):
        raise error

    monkeypatch.setitem(sys.modules, "course_utils.grading", types.SimpleNamespace(grade=grade))
    assert main(["grade", "subs"]) == code
    assert str(error) in capsys.readouterr().err


def test_parser_has_the_documented_subcommands_and_options():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert set(sub.choices) >= {"env", "assign", "grade", "report"}
    options = {
        name: {o for a in p._actions for o in a.option_strings} for name, p in sub.choices.items()
    }
    assert {"--json"} <= options["env"]
    assert {"--check", "--solutions", "--notebooks"} <= options["assign"]
    assert {"--out", "--timeout", "--quick", "--jobs", "--solutions"} <= options["grade"]
    assert {"--quick", "--out", "--timeout", "--solutions"} <= options["report"]


def test_a_command_is_required():
    with pytest.raises(SystemExit) as info:
        main([])
    assert info.value.code == 2


def test_python_dash_m_course_utils_runs_the_same_cli(monkeypatch, capsys):
    """`python -m course_utils ...` exits with main()'s code (run in this process: a fresh
    interpreter would spend most of the test importing torch)."""
    monkeypatch.setattr(sys, "argv", ["course", "env", "--json"])
    with pytest.raises(SystemExit) as info:
        runpy.run_module("course_utils", run_name="__main__")
    assert info.value.code == 0
    assert json.loads(capsys.readouterr().out)["device_class"] == device.device_class()
