"""Lesson 03's worker sweep plot marks a knee only where the sweep found one, and where this CPU
could not run two threads in parallel it says so, in the words of check 03-fast-loader."""

from __future__ import annotations

import pytest

from course_utils.lessons.data_loading import demo


def sweep(epochs: dict[int, float]) -> list[dict]:
    """Rows as sweep_workers returns them, with these epoch seconds per worker count."""
    return [
        {"num_workers": n, "epoch_s": s, "startup_s": 0.1, "workers_uss_mb": 10.0 * n}
        for n, s in epochs.items()
    ]


def drawn(fig) -> tuple[list[str], str]:
    """The left panel's legend entries and the note under the plots (the figure closed)."""
    import matplotlib.pyplot as plt

    legend = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
    note = " ".join(t.get_text().replace("\n", " ") for t in fig.texts)
    plt.close(fig)
    return legend, note


@pytest.fixture(autouse=True)
def agg():
    import matplotlib

    matplotlib.use("Agg")


def test_a_busy_cpu_gets_no_knee_and_the_checks_reason_not_a_knee_at_0_workers(monkeypatch):
    monkeypatch.setattr(demo, "parallel_speedup", lambda: 0.95)
    legend, note = drawn(demo.plot_sweep(sweep({0: 2.0, 1: 2.1, 2: 1.95, 4: 2.05})))
    assert not any(entry.startswith("knee") for entry in legend)
    assert note.startswith("no knee: two threads of CPU work ran 0.95x as fast as one here")
    assert "no loader could show a multi-process speedup" in note and "not timed" in note


def test_a_free_cpu_whose_workers_bought_nothing_gets_no_knee_either(monkeypatch):
    monkeypatch.setattr(demo, "parallel_speedup", lambda: 1.9)
    legend, note = drawn(demo.plot_sweep(sweep({0: 2.0, 1: 2.1, 2: 1.95})))
    assert not any(entry.startswith("knee") for entry in legend)
    assert note.startswith("no knee: num_workers=0 ran within 10% of the fastest epoch")


def test_a_sweep_with_a_speedup_marks_its_knee_without_probing_the_cpu(monkeypatch):
    monkeypatch.setattr(demo, "parallel_speedup", lambda: pytest.fail("probed the CPU"))
    legend, note = drawn(demo.plot_sweep(sweep({0: 2.0, 1: 1.5, 2: 1.1, 4: 1.05})))
    assert "knee: 2 workers" in legend and note == ""
