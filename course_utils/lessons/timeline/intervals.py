"""Time as sets of intervals (start, end), for asking a trace what ran when: merged, clipped,
intersected, subtracted, measured."""

from __future__ import annotations

from collections.abc import Iterable

Span = tuple[float, float]


def merge(spans: Iterable[Span]) -> list[Span]:
    """Overlapping or touching spans joined, in order."""
    out: list[list[float]] = []
    for a, b in sorted(spans):
        if b <= a:
            continue
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def clip(spans: list[Span], lo: float, hi: float) -> list[Span]:
    return [(max(a, lo), min(b, hi)) for a, b in spans if b > lo and a < hi]


def intersect(x: list[Span], y: list[Span]) -> list[Span]:
    out, i, j = [], 0, 0
    while i < len(x) and j < len(y):
        a, b = max(x[i][0], y[j][0]), min(x[i][1], y[j][1])
        if a < b:
            out.append((a, b))
        if x[i][1] < y[j][1]:
            i += 1
        else:
            j += 1
    return out


def subtract(x: list[Span], y: list[Span]) -> list[Span]:
    """The parts of `x` (merged) that no span of `y` (merged) covers."""
    out = []
    for a, b in x:
        start = a
        for c, d in y:
            if d <= start or c >= b:
                continue
            if c > start:
                out.append((start, c))
            start = max(start, d)
        if start < b:
            out.append((start, b))
    return out


def total(spans: list[Span]) -> float:
    return sum(b - a for a, b in spans)
