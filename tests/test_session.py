"""The mode a notebook runs in: its parameter, then $COURSE_QUICK, then the auto mode, which
runs full where this device's estimated full-mode time fits the notebook's budget. Devices
are faked (env_info), so a CPU machine tests the T4 and H100 decisions."""

from __future__ import annotations

import pytest

from course_utils import device, mode
from course_utils.session import decide_mode

T4 = {"device": "cuda", "device_name": "Tesla T4", "device_class": "cuda-tensorcore"}
H100 = {"device": "cuda", "device_name": "NVIDIA H100 80GB HBM3", "device_class": "cuda-tensorcore"}
A100 = {"device": "cuda", "device_name": "NVIDIA A100-SXM4-40GB", "device_class": "cuda-tensorcore"}
CPU = {"device": "cpu", "device_name": "a laptop CPU", "device_class": "cpu"}


@pytest.fixture
def on(monkeypatch):
    """Fake the device the decision sees; leave COURSE_QUICK unset."""
    monkeypatch.delenv("COURSE_QUICK", raising=False)
    monkeypatch.setattr("course_utils.selftest.estimate.host_probe_s", lambda: 0.009)
    monkeypatch.setattr(device, "peak_flops", lambda *a, **k: 60e9)  # a 2-core CPU's probe

    def use(env: dict, lesson: str | None):
        monkeypatch.setattr(device, "env_info", lambda *a, **k: dict(env))
        monkeypatch.setattr("course_utils.session.lesson_in_use", lambda: lesson)

    yield use
    mode.set_auto(None)  # setup's decision must not reach the next test


@pytest.mark.parametrize(
    ("env", "lesson", "quick"),
    [
        (T4, "01", False),
        (H100, "00", False),
        (CPU, "01", True),
        (H100, "11", False),
        (A100, "11", False),
        (T4, "11", False),
        (CPU, "11", True),
    ],
    ids=[
        "t4-full",
        "h100-full",
        "cpu-quick",
        "capstone-on-h100-full",
        "capstone-on-a100-full",
        "capstone-on-t4-full",
        "capstone-on-cpu-quick",
    ],
)
def test_auto_mode_runs_full_only_where_the_estimate_fits_the_budget(on, env, lesson, quick):
    on(env, lesson)
    decision = decide_mode(None)
    assert (decision.source, decision.quick) == ("auto", quick)
    assert env["device_class"] in decision.reason
    assert ("over" in decision.reason) == quick


def test_without_a_known_notebook_the_slowest_decides(on):
    on(T4, None)
    assert "the slowest notebook" in decide_mode(None).reason


def test_the_parameter_then_course_quick_decide_before_the_auto_mode(on, monkeypatch):
    on(CPU, "01")
    assert decide_mode(False) == mode.Decision(False, "parameter", "the parameter quick=False")
    monkeypatch.setenv("COURSE_QUICK", "0")
    assert decide_mode(None).source == "COURSE_QUICK" and not decide_mode(None).quick
    monkeypatch.setenv("COURSE_QUICK", "1")
    assert decide_mode(None).quick


def test_setup_says_which_mode_runs_why_and_how_to_switch(on, capsys):
    import course_utils as cu

    on(CPU, "01")
    info = cu.setup(None)
    out = capsys.readouterr().out
    assert info["quick"] and cu.is_quick()
    assert "quick mode: on (auto: full mode of notebook 01 is estimated at" in out
    assert "set quick = True (or False) in the parameters cell" in out and "in Colab" in out


def test_a_cpu_gets_full_mode_only_with_its_margin_to_spare(on, monkeypatch):
    """A laptop is rarely idle and the estimate may be short: full only if 3x it fits."""
    from course_utils.selftest import estimate as est

    on(CPU, "09")
    seconds = est.estimate("09", CPU, quick=False)["estimate_s"]
    assert est.CPU_MARGIN.value == 3.0
    for budget, quick in ((seconds * 2.9, True), (seconds * 3.1, False)):
        monkeypatch.setattr(est, "budget_s", lambda env, q, nc=None, b=budget: b)
        decision = decide_mode(None)
        assert decision.quick == quick, decision.reason
        assert "3x margin a CPU keeps" in decision.reason
    on(T4, "09")  # a GPU's estimate is taken as it is
    assert est.estimate("09", T4, quick=False)["margin"] == 1.0


def test_env_says_no_gpu_rather_than_a_cuda_version_and_shows_tf32():
    from course_utils.session import _tf32_line, _torch_cuda

    cpu = {"device": "cpu", "torch": "2.14.1+cu130", "cuda": "13.0"}
    assert _torch_cuda(cpu) == "2.14.1+cu130 (a CUDA 13.0 build) / no GPU"
    assert _tf32_line(cpu).startswith("not used")
    gpu = {"device": "cuda", "torch": "2.14.1+cu130", "cuda": "13.0"}
    assert _torch_cuda(gpu) == "2.14.1+cu130 / 13.0"
    assert _tf32_line({**gpu, "tf32": {"matmul": False, "cudnn": True}}) == (
        "matmul off, cuDNN conv on"
    )
    assert "compute capability 8.0" in _tf32_line({**gpu, "tf32": "not supported"})
