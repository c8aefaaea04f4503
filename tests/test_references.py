"""Reference results come from committed report runs, labelled with device, date and command."""

import json

import pytest

from course_utils import references

pytest.importorskip("IPython")


def _run(tmp_path, name, device_class, effects=(), checks=()):
    data = {
        "env": {"device_class": device_class, "device_name": name.upper()},
        "date": "2026-12-01 10:00 UTC",
        "command": "course report",
        "runs": {"05_fast_kernels": {"effects": list(effects), "checks": list(checks)}},
    }
    (tmp_path / f"{device_class}-{name}.json").write_text(json.dumps(data))


def test_rows_carry_each_runs_device_date_and_command_and_the_effects_spread(tmp_path):
    effect = {
        "metric": "time per step",
        "ratio": 1.5,
        "ratios": [1.4, 1.5, 1.6],
        "n": 3,
        "spread": [1.45, 1.55],
    }
    _run(
        tmp_path,
        "h200",
        "cuda-tensorcore",
        effects=[effect],
        checks=[{"check": "05-bucketing", "status": "passed", "value": 0.25}],
    )
    rows = references.reference_rows("05_fast_kernels", tmp_path)
    assert [r.what for r in rows] == ["time per step", "05-bucketing"]
    assert rows[0].figure == "1.50x (IQR 1.45-1.55, n=3 pairs)"
    assert rows[1].figure == "passed, measured 0.25"
    assert {(r.device_name, r.date, r.command) for r in rows} == {
        ("H200", "2026-12-01 10:00 UTC", "course report")
    }


def test_the_readers_own_class_is_left_out_and_no_run_is_said_plainly(tmp_path, capsys):
    _run(tmp_path, "epyc", "cpu-bf16", checks=[{"check": "05-bucketing", "status": "passed"}])
    (tmp_path / "notes.json").write_text("[1, 2]")  # not a report run: ignored
    (tmp_path / "broken.json").write_text("{")
    shown = []
    references_display = pytest.MonkeyPatch()
    references_display.setattr("IPython.display.display", lambda m: shown.append(m.data))
    try:
        rows = references.reference_results("05_fast_kernels", "cpu-bf16", results=tmp_path)
        assert rows == []
        assert "No committed reference run covers `05_fast_kernels`" in shown[-1]
        rows = references.reference_results("05_fast_kernels", "cuda", results=tmp_path)
        assert len(rows) == 1 and "EPYC (`cpu-bf16`)" in shown[-1]
    finally:
        references_display.undo()


def test_the_committed_results_are_found_from_the_installed_package():
    assert references.RESULTS.is_dir()
    assert references.reference_rows("04_mixed_precision")  # docs/results holds a report run


def test_show_source_displays_the_functions_code(monkeypatch):
    from course_utils.source import show_source

    shown = []
    monkeypatch.setattr("IPython.display.display", lambda m: shown.append(m.data))
    show_source(references.reference_rows)
    assert shown[0].startswith("```python\ndef reference_rows(")
