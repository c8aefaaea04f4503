"""The grading kernel's tripwire (course_utils.integrity): a harness untouched by the notebook
reads as unchanged, and each way a notebook can rebind what an instrument calls is named,
and a probe asked for after it reports that instead of its readings (judged.serve)."""

from __future__ import annotations

import importlib
import pkgutil
import socket
import threading

import numpy as np
import pytest
import torch

import course_utils.lessons as lessons
from course_utils import integrity, judged, probes, wire
from course_utils.lessons.habits import probes as habit_probes
from course_utils.lessons.habits import spy

CELL = "/tmp/ipykernel_4242/3141592653.py"  # where ipykernel compiles a notebook cell


def in_cell(source: str, **names) -> None:
    """Run `source` as a notebook cell would: its code compiled from ipykernel's file."""
    exec(compile(source, CELL, "exec"), names)


@pytest.fixture
def restore():
    """Put back every attribute a test rebinds (a list of (object, name))."""
    saved = []

    def remember(obj, name):
        saved.append((obj, name, obj.__dict__[name] if name in obj.__dict__ else None))

    yield remember
    for obj, name, value in reversed(saved):
        setattr(obj, name, value)


def test_the_whole_harness_as_imported_reads_as_unchanged():
    for info in pkgutil.iter_modules(lessons.__path__):
        package = importlib.import_module(f"course_utils.lessons.{info.name}")
        for sub in pkgutil.iter_modules(package.__path__):
            if sub.name not in ("worker", "__main__"):
                importlib.import_module(f"course_utils.lessons.{info.name}.{sub.name}")
    assert integrity.changed() == []


def test_a_cells_function_bound_to_a_harness_name_is_named(restore):
    restore(habit_probes, "shares_memory")
    in_cell("hp.shares_memory = lambda tensor, array: True", hp=habit_probes)
    assert integrity.changed() == ["course_utils.lessons.habits.probes.shares_memory"]


def test_another_installed_function_under_a_harness_name_is_named(restore):
    restore(habit_probes, "thrown_away_bytes")
    habit_probes.thrown_away_bytes = np.shares_memory  # installed code, but not the one imported
    assert "course_utils.lessons.habits.probes.thrown_away_bytes" in integrity.changed()


def test_a_replaced_probe_and_a_replaced_method_are_named(restore, monkeypatch):
    name = "course_utils.lessons.habits.probes:converted"
    monkeypatch.setitem(probes.PROBES, name, lambda *a, **k: {"shares": True})
    restore(spy.HabitSpy, "__torch_function__")
    in_cell("S.__torch_function__ = lambda self, f, t, a=(), k=None: f(*a, **(k or {}))",
            S=spy.HabitSpy)  # fmt: skip
    found = integrity.changed()
    assert f"course_utils.probes.PROBES[{name!r}]" in found
    assert "course_utils.lessons.habits.spy.HabitSpy.__torch_function__" in found


def test_torch_and_clock_functions_replaced_from_a_cell_are_named(restore):
    import time

    restore(torch, "is_anomaly_enabled")
    restore(time, "perf_counter")
    in_cell("torch.is_anomaly_enabled = lambda: False\ntime.perf_counter = lambda: 0.0",
            torch=torch, time=time)  # fmt: skip
    assert {"torch.is_anomaly_enabled", "time.perf_counter"} <= set(integrity.changed())


def test_putting_it_back_reads_as_unchanged_again(restore):
    restore(habit_probes, "shares_memory")
    in_cell("hp.shares_memory = lambda tensor, array: True", hp=habit_probes)
    assert integrity.changed()
    habit_probes.shares_memory = importlib.import_module(
        "course_utils.lessons.habits.arrays"
    ).shares_memory
    assert integrity.changed() == []


def _ask(answers: list, probe_name: str, args: tuple) -> dict:
    """What the kernel's side (judged.serve) replies to one probe request, then the verdict."""
    judge_end, kernel_end = socket.socketpair()
    with judge_end, kernel_end:
        served = threading.Thread(target=judged.serve, args=(kernel_end, answers))
        served.start()
        wire.send(judge_end, {"probe": probe_name}, (args, {}), with_value=True)
        reply, value = wire.receive(judge_end)
        wire.send(judge_end, {"verdict": {}})
        served.join(timeout=30)
    return {**reply, "value": value}


def test_a_probe_after_a_rebinding_reports_it_instead_of_its_readings(restore):
    ref = judged.AnswerRef(0)
    assert _ask([lambda x: 2 * x], "course_utils.probes:call_with", (ref, 3))["value"] == 6
    restore(habit_probes, "shares_memory")
    in_cell("hp.shares_memory = lambda tensor, array: True", hp=habit_probes)
    told = _ask([lambda x: 2 * x], "course_utils.probes:call_with", (ref, 3))["raised"]
    assert told["type"] == "HarnessChanged"
    assert "course_utils.lessons.habits.probes.shares_memory" in told["message"]


def test_a_rebinding_made_by_the_learners_call_is_reported_too(restore):
    restore(habit_probes, "shares_memory")

    def sneaky(x):
        in_cell("hp.shares_memory = lambda tensor, array: True", hp=habit_probes)
        return x

    ref = judged.AnswerRef(0)
    told = _ask([sneaky], "course_utils.probes:call_with", (ref, 3))
    assert told["raised"]["type"] == "HarnessChanged"
