"""`course selftest`: items in their own processes, a hang or a crash loses only itself, an
interrupted run resumes, the json/md say what ran where, and nothing needs the notebook stack.

Fake items (tests/selftest_fakes.py) stand in for lessons, so the runner is tested in
seconds; two real checks and the lessons' selftest entries are tested for what they report.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from course_utils.selftest import selftest
from course_utils.selftest.items import CHECK, EFFECT, Item
from course_utils.selftest.runner import STATE

ROOT = Path(__file__).resolve().parents[1]


def fake(name: str, kind: str = CHECK) -> Item:
    return Item("zz", kind, name, target=f"selftest_fakes:{name}")


@pytest.fixture
def ran(tmp_path, monkeypatch):
    """The names of the fake items that ran, in order (each child appends its own)."""
    log = tmp_path / "ran.txt"
    monkeypatch.setenv("COURSE_FAKE_LOG", str(log))
    return lambda: log.read_text().split() if log.exists() else []


@pytest.fixture(scope="module")
def isolated(tmp_path_factory):
    """One run over a passing, a hanging, a crashing and a raising item, then a pass."""
    out = tmp_path_factory.mktemp("isolated")
    log = out / "ran.txt"
    mp = pytest.MonkeyPatch()
    mp.setenv("COURSE_FAKE_LOG", str(log))
    items = [fake(n) for n in ("passes", "hangs", "crashes", "raises", "passes_too")]
    try:
        run = selftest(out / "st", quick=True, timeout=4, items=items)
    finally:
        mp.undo()
    return run, out / "st", log.read_text().split()


def test_a_hang_and_a_crash_each_lose_only_their_own_item(isolated):
    run, _, ran = isolated
    status = {k.split("/")[-1]: r["status"] for k, r in run.items.items()}
    assert status == {
        "passes": "passed",
        "hangs": "timeout",
        "crashes": "crashed",
        "raises": "error",
        "passes_too": "passed",
    }
    assert ran == ["passes", "hangs", "crashes", "raises", "passes_too"]
    assert not run.ok


def test_failed_items_say_why(isolated):
    run, _, _ = isolated
    detail = {k.split("/")[-1]: r.get("detail", "") for k, r in run.items.items()}
    assert "after 4 s" in detail["hangs"]
    assert "signal 9" in detail["crashes"] and "about to die" in detail["crashes"]
    assert "RuntimeError: CUDA error" in detail["raises"]
    assert run.items["zz/check/hangs"]["seconds"] < 30  # killed, not waited for


def test_the_json_and_md_name_every_item_with_its_status(isolated):
    run, out, _ = isolated
    data = json.loads((out / "selftest.json").read_text())
    assert data["ok"] is False and data["quick"] is True
    assert set(data["items"]) == set(run.items)
    assert {"device", "device_class", "device_name", "torch", "driver"} <= set(data["env"])
    md = (out / "selftest.md").read_text()
    assert "| zz/check/hangs | timeout |" in md and "| zz/check/crashes | crashed |" in md


def test_an_interrupted_run_resumes_where_it_stopped(tmp_path, ran):
    items = [fake("passes"), fake("passes_too")]
    out = tmp_path / "st"
    selftest(out, quick=True, timeout=30, items=items[:1])  # as if stopped after the first
    assert ran() == ["passes"]
    state = json.loads((out / STATE).read_text())
    assert list(state["items"]) == ["zz/check/passes"]
    run = selftest(out, quick=True, timeout=30, items=items)
    assert ran() == ["passes", "passes_too"]  # the first item did not run again
    assert run.ok and set(run.items) == {i.key for i in items}


def test_a_spent_budget_skips_the_rest_and_a_resumed_run_runs_them(tmp_path, ran):
    items = [fake("passes"), fake("passes_too")]
    out = tmp_path / "st"
    first = selftest(out, quick=True, timeout=30, budget=0, items=items)
    assert {r["status"] for r in first.items.values()} == {"skipped"}
    assert "budget" in first.items["zz/check/passes"]["detail"]
    assert selftest(out, quick=True, timeout=30, items=items).ok
    assert ran() == ["passes", "passes_too"]


def test_a_run_in_another_mode_starts_afresh(tmp_path, ran):
    out = tmp_path / "st"
    selftest(out, quick=True, timeout=30, items=[fake("passes")])
    selftest(out, quick=False, timeout=30, items=[fake("passes")])
    assert ran() == ["passes", "passes"]


@pytest.fixture(scope="module")
def real(tmp_path_factory):
    """Two real checks of lesson 00 and a fake effect, with --reference into a tmp folder."""
    out = tmp_path_factory.mktemp("real")
    mp = pytest.MonkeyPatch()
    mp.setenv("COURSE_FAKE_LOG", str(out / "ran.txt"))
    items = [Item("00", CHECK, "00-train-flops"), Item("00", CHECK, "00-activation-bytes")]
    items.append(Item("00", EFFECT, "fake", target="selftest_fakes:effect"))
    try:
        run = selftest(out / "st", quick=True, timeout=120, items=items, reference=out / "docs")
    finally:
        mp.undo()
    return run, out


def test_real_checks_pass_with_their_reference_and_report_value_and_threshold(real):
    run, _ = real
    flops = run.items["00/check/00-train-flops"]
    assert flops["status"] == "passed"
    assert flops["result"]["value"] == flops["result"]["threshold"] == 4685824
    assert run.items["00/effect/fake"]["result"]["ratio"] == 2.0


def test_thresholds_carry_their_evidence_and_flag_an_unmeasured_class(real):
    run, _ = real
    rows = {t["name"]: t for t in run.thresholds}
    assert rows and all(t["lesson"] == "00" and t["evidence"] for t in rows.values())
    assert all(
        t["unmeasured_here"] == (run.env["device_class"] not in t["measured_on"])
        for t in rows.values()
    )


def test_a_threshold_lists_the_check_parts_measured_against_it():
    from course_utils.selftest.thresholds import _measured_against

    part = {"name": "speed", "status": "passed", "value": 1.4, "threshold": 1.15}
    records = [("09-fuse", {"result": {"parts": [part, {**part, "threshold": 2.0}]}})]
    assert _measured_against(1.15, records) == [
        {"check": "09-fuse", "part": "speed", "value": 1.4, "status": "passed"}
    ]


def test_estimates_each_notebook_against_its_budget(real):
    run, out = real
    [row] = run.estimates
    assert row["notebook"] == "00_measuring" and row["budget_s"] == 300
    assert row["estimate_s"] > row["quick_estimate_s"] > 0
    md = (out / "st" / "selftest.md").read_text()
    assert "## Estimated notebook run time here" in md and "| 00_measuring |" in md


def test_reference_is_written_only_from_a_run_that_passed(real, isolated):
    run, out = real
    stem = f"{run.env['device_class']}-"
    written = sorted(p.name for p in (out / "docs").iterdir())
    assert len(written) == 2 and all(p.startswith(stem) and "-selftest." in p for p in written)
    from course_utils.selftest.write import publish

    failed, _, _ = isolated
    publish(failed, out / "none")
    assert not (out / "none").exists()


def test_selftest_runs_without_the_notebook_stack(tmp_path):
    """nbformat, nbclient and papermill made unimportable: the CLI still runs an item."""
    code = f"""
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("nbformat", "nbclient", "papermill"):
            raise ImportError(f"blocked: {{name}}")
sys.meta_path.insert(0, Block())
sys.path.insert(0, {str(ROOT / "tests")!r})
from course_utils.selftest import selftest
from course_utils.selftest.items import Item, discover
items = discover(["00"]) + [Item("zz", "check", "notebook_stack_loaded",
                                   target="selftest_fakes:notebook_stack_loaded")]
run = selftest({str(tmp_path / "st")!r}, quick=True, items=items[-1:])
loaded = [m for m in sys.modules if m.split(".")[0] in ("nbformat", "nbclient", "papermill")]
print(run.ok, loaded)
"""
    env = {"COURSE_FAKE_LOG": str(tmp_path / "ran.txt"), "COURSE_DATASET": "offline"}
    import os

    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split("\n")[-2] == "True []"


def test_the_plan_takes_the_notebooks_that_fit_the_budget_in_order():
    from course_utils.selftest.plan import fit_budget

    rows = [{"notebook": f"0{i}_x", "estimate_s": s} for i, s in enumerate([50, 400, 100, 80])]
    assert fit_budget(rows, 240) == ["00", "02", "03"]
    assert fit_budget(rows, 10) == []


def test_autocast_flops_count_at_the_16_bit_rate_and_a_notebook_may_have_its_own_budget():
    from course_utils.selftest import estimate

    t4 = {"device": "cuda", "device_name": "Tesla T4"}
    r = estimate.Rates(2e12, 1.0, "test", amp_flops=8e12)
    assert estimate.seconds(estimate.Cost(0, 0, 0, amp_gflop=8_000), r) == pytest.approx(1.0)
    assert estimate.seconds(estimate.Cost(2_000, 0, 0), r) == pytest.approx(1.0)
    capstone = estimate.cost_of("11")
    assert capstone.full.amp_gflop > capstone.full.gflop > 0 and "11" not in estimate.COSTS
    assert estimate.budget_s(t4, False, capstone) == 900 and estimate.budget_s(t4, False) == 300
    h100 = {"device": "cuda", "device_name": "NVIDIA H100 80GB HBM3"}
    assert estimate.budget_s(h100, False, capstone) == 180


def test_an_effect_of_one_ratio_prints_n1_no_iqr_and_pairs_print_their_iqr():
    """A single ratio has no spread: the line and selftest.md say "n=1, no IQR", never an
    IQR of one value such as "4.09-4.09"."""
    from course_utils.effects import effect
    from course_utils.selftest import Selftest, item_line
    from course_utils.selftest.write import markdown

    one = effect("one ratio", baseline=4.09e-3, improved=1e-3, show=False).to_dict()
    pairs = effect("pairs", baseline=2.0, improved=1.0, ratios=[1.9, 2.0, 2.1], show=False)
    records = {
        "02/effect/one": {"status": "measured", "result": one, "seconds": 0.5},
        "04/effect/pairs": {"status": "measured", "result": pairs.to_dict(), "seconds": 0.6},
    }
    line = item_line(Item("02", EFFECT, "one"), records["02/effect/one"])
    assert line.endswith("4.09x (n=1, no IQR)") and "4.09-4.09" not in line
    assert item_line(Item("04", EFFECT, "pairs"), records["04/effect/pairs"]).endswith(
        "2.00x (IQR 1.95-2.05, n=3)"
    )
    env = {"device_class": "cpu", "device_name": "a CPU"}
    md = markdown(Selftest(env, True, "today", "course selftest", 1.1, records))
    assert "| 02/effect/one | measured | 0.00409 s | 0.001 s | 4.09x (n=1, no IQR) | 0.5 |" in md
    assert "| 2.00x (IQR 1.95-2.05, n=3) | 0.6 |" in md and "4.09-4.09" not in md
