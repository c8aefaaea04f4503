"""The toy lesson's two checks: each asks one plain function for one number."""

from __future__ import annotations

from ...checks import check, correct
from ...probes import call_with, observe

THRESHOLDS: dict = {}  # exact answers: nothing measured


@check("toy-double", points=1, hint="Return x + x.")
def check_double(double):
    got = observe(call_with, double, 3)  # plain data: an object's own __eq__ never runs here
    ok = type(got) is int and got == 6
    return [correct("double(3)", ok, f"double(3) returned {got!r}, expected 6")]


@check("toy-square", points=2, hint="Return x * x.")
def check_square(square):
    got = observe(call_with, square, 4)
    return [correct("square(4)", got == 16, f"square(4) returned {got!r}, expected 16")]
