"""course_utils.selftest.estimate on a CPU: the model's seconds times the ratio measured on
the reference CPU, and the auto mode's margin on top (tests/test_session.py decides with it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from course_utils.selftest import estimate as est
from course_utils.selftest.items import LESSONS

ROOT = Path(__file__).resolve().parents[1]
MEASURED = ROOT / Path(est.CPU_RATIO_SOURCE).with_suffix(".json")
CPU = {"device": "cpu", "device_name": "a laptop CPU", "device_class": "cpu"}
T4 = {"device": "cuda", "device_name": "Tesla T4", "device_class": "cuda-tensorcore"}


def test_every_cpu_ratio_is_the_committed_measurement_of_its_notebook_and_mode():
    rows = json.loads(MEASURED.read_text())["rows"]
    measured = {(r["notebook"].split("_")[0], r["mode"]): _ratio(r) for r in rows}
    ratios = {
        (prefix, mode): pair[i]
        for prefix, pair in est.CPU_RATIO.items()
        for i, mode in enumerate(("quick", "full"))
    }
    assert ratios == measured
    assert set(est.CPU_RATIO) == set(LESSONS), "every notebook measured in both modes"


def _ratio(row: dict) -> float:
    """Measured over modelled; a run stopped at its deadline gives a lower bound, which may
    raise the model's estimate but never lower it."""
    ratio = row["measured_s"] / row["model_s"]
    return round(ratio if row["finished"] else max(1.0, ratio), 2)


@pytest.mark.parametrize("prefix", sorted(LESSONS))
def test_a_cpu_estimate_is_the_model_times_its_ratio_and_a_gpu_estimate_the_model(
    prefix, monkeypatch
):
    monkeypatch.setattr(est, "host_probe_s", lambda: 0.009)
    monkeypatch.setattr("course_utils.device.peak_flops", lambda *a, **k: 60e9)
    r = est.rates(CPU)
    for quick, i in ((True, 0), (False, 1)):
        cost = est.cost_of(prefix)
        model = est.seconds(cost.quick if quick else cost.full, r)
        got = est.estimate(prefix, CPU, quick=quick, r=r)
        assert got["estimate_s"] == pytest.approx(model * est.CPU_RATIO[prefix][i])
        assert got["margin"] == est.CPU_MARGIN.value
    assert est.estimate(prefix, T4, quick=False)["cpu_ratio"] == 1.0
