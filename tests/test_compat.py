"""A torchvision built for another torch: `course env` and a notebook's setup say, in one line,
what to install, instead of `operator torchvision::nms does not exist`. The import failure is
faked (monkeypatch, or a stand-in package on PYTHONPATH), never installed."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

from course_utils import cli, compat, session
from course_utils.errors import TorchvisionMismatch

NMS = "operator torchvision::nms does not exist"


@pytest.mark.parametrize(
    "torch_version, series",
    [("2.14.1+cu130", "0.29.*"), ("2.4.0", "0.19.*"), ("2.10.0+cpu", "0.25.*"), ("1.13.1", None)],
)
def test_the_torchvision_series_follows_torchs_minor_release(torch_version, series):
    assert compat.torchvision_for(torch_version) == series


def test_the_fix_installs_the_matching_series_from_the_index_torch_came_from():
    assert compat.fix_command("2.14.1", "0.25.0") == 'pip install "torchvision==0.29.*"'
    assert compat.fix_command("2.14.1+cu130", "0.25.0") == (
        'pip install "torchvision==0.29.*" --index-url https://download.pytorch.org/whl/cu130'
    )
    # the right release of the wrong build (CPU beside CUDA): reinstall it, leave torch alone
    assert compat.fix_command("2.14.1+cpu", "0.29.1+cu130") == (
        'pip install --force-reinstall --no-deps "torchvision==0.29.*" '
        "--index-url https://download.pytorch.org/whl/cpu"
    )
    assert "github.com/pytorch/vision" in compat.fix_command("3.0.0", "0.40.0")


def _broken_torchvision():
    raise RuntimeError(NMS)


def test_course_env_says_what_to_install_in_one_line_and_exits_non_zero(monkeypatch, capsys):
    monkeypatch.setattr(compat, "_import_torchvision", _broken_torchvision)
    monkeypatch.setattr(compat, "_installed", lambda name: "0.25.0")
    monkeypatch.setattr(session, "env", lambda **kw: pytest.fail("env ran"))
    assert cli.main(["env"]) == 2
    out, err = capsys.readouterr()
    wanted = compat.fix_command(torch.__version__, "0.25.0")
    assert out == "" and err.count("\n") == 1, err
    assert err == (
        f"course env: torchvision 0.25.0 does not load with torch {torch.__version__} ({NMS}): "
        f"install the torchvision built for this torch: {wanted}\n"
    )


def test_a_notebook_shows_the_mismatch_as_one_line_not_a_traceback(monkeypatch):
    monkeypatch.setattr(compat, "_import_torchvision", _broken_torchvision)
    with pytest.raises(TorchvisionMismatch) as raised:
        compat.require_torchvision()
    [line] = raised.value._render_traceback_()  # what IPython shows instead of the frames
    assert line.startswith("TorchvisionMismatch: torchvision ") and "pip install" in line


def test_a_missing_torchvision_is_left_to_say_so_itself(monkeypatch):
    def missing():
        raise ModuleNotFoundError("No module named 'torchvision'", name="torchvision")

    monkeypatch.setattr(compat, "_import_torchvision", missing)
    with pytest.raises(ModuleNotFoundError):
        compat.require_torchvision()


def test_course_env_in_a_fresh_process_with_a_torchvision_that_fails_to_load(tmp_path):
    """The failure as a learner meets it: `import torchvision` itself raises (a stand-in package
    first on PYTHONPATH), from the harness's own import of it."""
    fake = tmp_path / "torchvision"
    fake.mkdir()
    (fake / "__init__.py").write_text(f"raise RuntimeError({NMS!r})\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    run = subprocess.run(
        [sys.executable, "-m", "course_utils", "env"], capture_output=True, text=True, env=env
    )
    assert run.returncode == 2 and run.stdout == ""
    [line] = run.stderr.splitlines()
    assert line.startswith("course env: torchvision ") and NMS in line
    assert 'pip install --force-reinstall --no-deps "torchvision==' in line  # 0.29 is installed
