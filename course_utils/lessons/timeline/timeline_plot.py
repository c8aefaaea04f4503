"""A timeline of a CPU trace drawn with matplotlib, from the trace's own events: one row per
thread (per rank and thread on two ranks), the step's phases as coloured spans, the operators
running on the main thread in grey beneath them, collectives on their own threads. What
Perfetto (https://ui.perfetto.dev) draws interactively, reduced to a picture."""

from __future__ import annotations

from .attribution import is_collective, phases
from .intervals import merge
from .trace import events, main_thread, rank


def plot_timeline(traces: list[dict], *, title: str = "", steps: int | None = None):
    """Draw each trace's threads; `steps`: only the first N recorded steps."""
    import matplotlib.pyplot as plt

    rows = []  # (label, spans (start, width) in ms, colour, text per span)
    origin = None
    for trace in traces:
        evs, main = events(trace), main_thread(trace)
        named = phases(trace)
        if origin is None:
            origin = min(e.ts for e in evs if e.tid == main and e.name.startswith("ProfilerStep"))
        end = None
        if steps is not None:
            starts = sorted(
                e.ts for e in evs if e.tid == main and e.name.startswith("ProfilerStep")
            )
            end = starts[steps] if steps < len(starts) else None
        keep = (lambda t: True) if end is None else (lambda t, end=end: t < end)
        who = f"rank {rank(trace)} " if len(traces) > 1 else ""
        names = list(dict.fromkeys(n for n, _ in named))
        spans = [((p.ts - origin) / 1e3, p.dur / 1e3, f"C{names.index(n) % 10}", n)
                 for n, p in named if keep(p.ts)]  # fmt: skip
        rows.append((f"{who}phases", spans))
        ops = merge(
            (e.ts, e.end) for e in evs if e.tid == main and e.cat == "cpu_op" and keep(e.ts)
        )
        rows.append(
            (f"{who}operators", [((a - origin) / 1e3, (b - a) / 1e3, "0.45", "") for a, b in ops])
        )
        others = sorted({e.tid for e in evs if e.tid != main and is_collective(e.name)}, key=str)
        for i, tid in enumerate(others):
            comm = [((e.ts - origin) / 1e3, e.dur / 1e3, "C3", "")
                    for e in evs if e.tid == tid and is_collective(e.name) and keep(e.ts)]  # fmt: skip
            rows.append((f"{who}collectives ({i + 1})", comm))
    fig, ax = plt.subplots(figsize=(10, 0.45 * len(rows) + 1.2))
    for y, (_, spans) in enumerate(reversed(rows)):
        for start, width, colour, text in spans:
            ax.broken_barh([(start, width)], (y - 0.4, 0.8), color=colour)
            if text and width > 0:
                ax.text(start + width / 2, y, text, ha="center", va="center", fontsize=7,
                        clip_on=True)  # fmt: skip
    ax.set_yticks(range(len(rows)), [label for label, _ in reversed(rows)])
    ax.set_xlabel("ms since the first recorded step began")
    ax.set_title(title)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return ax
