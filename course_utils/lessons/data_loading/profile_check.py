"""Lesson 03's check of exercise 1, 03-profile: is the step data-bound? The learner's profiler
splits epochs whose loading and device time are known (a sleepy dataset, a simulated
asynchronous device) into waiting and computing; the check compares the split with what the
dataset and the device measured of their own time, and with the epoch's wall time, which it
times itself around the probe."""

from __future__ import annotations

from ...checks import check, correct
from ...probes import observe_timed, specimen_rng
from .checks import THRESHOLDS
from .demo import SCENARIOS, EpochProfile
from .readings import profile_reading

# items per scenario: 12 batches of 8 in a notebook; the judge draws one per run (the
# scenarios' loading and device time scale together, so the evidence holds at each)
ITEMS = (96, 88, 104)


def _field(result, name: str):
    return result[name] if isinstance(result, dict) else getattr(result, "fields", {})[name]


def _as_profile(result) -> EpochProfile:
    """What the learner's profiler returned (an EpochProfile arrives as its fields), as one."""
    fields = getattr(result, "fields", None)
    keyed = result if isinstance(result, dict) else fields if isinstance(fields, dict) else None
    if keyed is not None and {"data_s", "compute_s"} <= set(keyed):
        return EpochProfile(float(_field(result, "data_s")), float(_field(result, "compute_s")))
    if isinstance(result, tuple | list) and len(result) == 2:
        return EpochProfile(float(result[0]), float(result[1]))
    kind = getattr(result, "type_name", type(result).__name__)
    raise TypeError(f"profile_epoch must return an EpochProfile, got {kind}")


@check(
    "03-profile",
    points=1,
    hint="Reread 'Baseline' and lesson 00's synchronised timing: when step() returns, has the "
    "work it queued finished? Split the epoch into waiting and computing with wall-clock "
    "readings, and ask which clock reading the waits before the first batch and after the last "
    "one fall between.",
    in_kernel="the dataset's loading seconds and the simulated device's busy seconds are "
    "measured beside the learner's profiler",
)
def check_profile(profile_epoch) -> list:
    missed, edge = THRESHOLDS["profile_error"].value, THRESHOLDS["edge_s"].value
    parts = []
    n = specimen_rng().choice(ITEMS)
    scenarios = {**SCENARIOS, "slow start and end": (0.0002, 0.002, True)}
    for name, (item_s, step_s, bound) in scenarios.items():
        edges = edge if name == "slow start and end" else 0.0
        # the wall time from this side: the epoch, its set-up and one round trip (~ms)
        seen, wall = observe_timed(profile_reading, profile_epoch, n, item_s, step_s, edges)
        got = _as_profile(seen["profile"])
        loading, busy = float(seen["loading_s"]), float(seen["busy_s"])
        ok = _consistent(got, loading, busy, wall, missed)
        msg = (
            f"yours: {got.data_s:.3f} s waiting, {got.compute_s:.3f} s computing; measured: the "
            f"dataset loaded for {loading:.3f} s, the device worked {busy:.3f} s, "
            f"the epoch took {wall:.3f} s ({'data' if bound else 'compute'}-bound)"
        )
        why = "" if ok else _why_profile(got, loading, busy, edges)
        parts.append(correct(f"{name} step", ok, msg + why))
    return parts


def _consistent(got: EpochProfile, loading: float, busy: float, wall: float, missed: float) -> bool:
    """Waiting covers at least the loading, computing at least the device's work (each may
    miss `missed` of it, plus 10 ms), and neither takes time the other certainly used. On a
    loaded machine a correct profiler bills thread wake-ups to the step: the upper bounds,
    from the epoch's wall time, leave room for that."""
    slack = 0.01
    low_data, low_compute = (1 - missed) * loading - slack, (1 - missed) * busy - slack
    return (
        low_data <= got.data_s <= wall - low_compute
        and low_compute <= got.compute_s <= wall - low_data
        and got.total_s <= wall * 1.1 + slack
    )


def _why_profile(got: EpochProfile, loading: float, busy: float, edge_s: float = 0.0) -> str:
    """Name the likely mistake: each leaves its own signature in the two numbers."""
    near = lambda a, b: abs(a - b) <= 0.25 * b + 0.01  # noqa: E731
    if edge_s and near(got.compute_s, busy) and abs(got.data_s - (loading - edge_s)) < edge_s / 2:
        return (
            f" (about {edge_s:.2f} s of waiting is missing: this loader waits that long before its "
            "first batch and again after its last; start the clock before the loop and read it "
            "once more when the loop ends)"
        )
    if near(got.data_s, busy) and near(got.compute_s, loading):
        return " (the two are swapped)"
    if got.data_s < 0.5 * loading and got.compute_s < 0.5 * busy:
        return " (both far too small: sleeping and waiting use no CPU time; use time.perf_counter)"
    if got.compute_s < 0.5 * busy:
        return (
            " (the step's device work was not billed to the step: synchronize() before "
            "reading the clock after it)"
        )
    if near(got.compute_s, busy):
        return (
            " (the computing is right; waiting is from the end of a step to the next batch, "
            "and after the last)"
        )
    return ""
