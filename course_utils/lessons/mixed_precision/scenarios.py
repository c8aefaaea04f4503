"""The AMP-step scenarios: train a copy of a snapshot model with the learner's step, replay the
steps its scaler did not skip in float32, and keep what was measured.

The check (checks.py) judges a `ScenarioRun`; the notebook's symptom table (`symptoms`) prints
the same measurements for a step it is asked to diagnose, without naming a cause.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from ... import wire
from ...amp_calls import CallLog, Event, watch
from . import demo
from .instrument import StepProbe, params, worst_update

STEPS, LR, MAX_NORM = 6, 0.01, 0.5  # `early` gradient norms are 27-44: clipping always acts
# what PyTorch says when a scaler's step() comes twice without update() in between
NO_UPDATE = ("unscale_() is being called after step()", "step() has already been called")
SCENARIOS = (  # (name, snapshot, dtype): the three situations an AMP step must handle
    ("fp16, large gradients", "early", torch.float16),
    ("fp16, small gradients", "late", torch.float16),
    ("bf16", "early", torch.bfloat16),
)


@dataclass
class ScenarioRun:
    """What one scenario measured: the forward's dtypes, autocast during backward, skipped
    steps, each returned loss beside float32's, and the parameter change vs float32's."""

    name: str
    dtype: torch.dtype
    out_dtypes: set[str] = field(default_factory=set)
    backward_autocast: bool = False
    skipped: int = 0
    returned: list[tuple[object, float]] = field(default_factory=list)
    update_error: float = 0.0  # worst parameter tensor's relative error vs float32's change
    update_ratio: float = 1.0  # that tensor's change, as a multiple of float32's (1: none moved)
    grad_scale: float = 1.0  # gradient reaching the output, as a multiple of float32's
    stale: list[bool] = field(default_factory=list)  # per backward: old .grad still there
    calls: CallLog = field(default_factory=CallLog)  # what step() called, in order
    refused: str | None = None  # PyTorch's words, if it refused a step (update() missing)
    fp32_norm: float = 0.0  # float32's total gradient norm at the first step, before clipping
    fp32_zeros: float = 0.0  # its share of exactly-zero entries

    @property
    def want(self) -> str:
        return str(self.dtype).replace("torch.", "")


def train_steps(make_amp_step, snapshot: str, dtype: torch.dtype, seed: int = 2) -> dict:
    """Train `STEPS` steps of the snapshot model with the learner's step, recording around it
    (instrument.StepProbe, amp_calls.watch): its returns, the parameters before each step and
    after the last, and what the instruments saw, as plain data (the probe's side)."""
    model, x, y = demo.snapshot(snapshot, seed=seed)
    probe = StepProbe(model)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    calls, returned, seen = CallLog(), [], [params(model)]
    refused = None
    with watch(opt, calls):
        step = make_amp_step(probe, F.mse_loss, opt, torch.device("cpu"), dtype, MAX_NORM)
        for i in range(STEPS):
            calls.step = i
            try:
                returned.append(step(x, y))
            except RuntimeError as exc:  # PyTorch refused this step: the verdict says why
                if not any(words in str(exc) for words in NO_UPDATE):
                    raise
                refused = str(exc).splitlines()[0]
                break
            seen.append(params(model))
    return {
        "returned": returned,
        "params": seen,
        "refused": refused,
        "out_dtypes": sorted({str(d).replace("torch.", "") for d in probe.out_dtypes}),
        "backward_autocast": list(probe.backward_autocast),
        "stale": list(probe.stale_grads),
        "out_grad_max": list(probe.out_grad_max),
        "events": [dataclasses.asdict(e) for e in calls.events],
    }


def _loaded(model: torch.nn.Module, values) -> torch.nn.Module:
    with torch.no_grad():
        for p, v in zip(model.parameters(), values, strict=True):
            p.copy_(torch.as_tensor(v))
    return model


def scenario_from(
    record: dict, name: str, snapshot: str, dtype: torch.dtype, seed: int = 2
) -> ScenarioRun:
    """The ScenarioRun of `train_steps`'s record, everything compared computed here: the
    float32 loss of the weights before each step (what step() must return), the steps the
    weights did not move (skipped), float32 replaying as many steps as were not skipped on a
    twin started from the same weights, and the parameter change against it."""
    model, x, y = demo.snapshot(snapshot, seed=seed)
    start, twin = params(model), copy.deepcopy(model)
    first = StepProbe(copy.deepcopy(model))  # float32's gradient at the output, first step
    F.mse_loss(first(x), y).backward()
    run = ScenarioRun(name, dtype)
    grads = torch.cat([p.grad.flatten() for p in first.inner.parameters()])
    run.fp32_norm, run.fp32_zeros = grads.norm().item(), (grads == 0).float().mean().item()
    seen = [[torch.as_tensor(v).float() for v in step] for step in record["params"]]
    returned = list(record["returned"])
    if len(seen) != len(returned) + 1:
        raise ValueError("a record of the steps with one parameter set per step and one more")
    with torch.no_grad():  # the float32 loss of each step's weights: what step() must return
        for got, before in zip(returned, seen, strict=False):
            run.returned.append((got, F.mse_loss(_loaded(model, before)(x), y).item()))
    run.skipped = sum(
        all(torch.equal(a, b) for a, b in zip(before, after, strict=True))
        for before, after in zip(seen, seen[1:], strict=False)
    )
    run.refused = None if record["refused"] is None else str(record["refused"])
    ref = demo.fp32_step(twin, F.mse_loss, torch.optim.SGD(twin.parameters(), lr=LR), MAX_NORM)
    for _ in range(len(run.returned) - run.skipped):
        ref(x, y)
    moved = [p - s for p, s in zip(seen[-1], start, strict=True)]
    ref_moved = [p - s for p, s in zip(params(twin), start, strict=True)]
    run.update_error, run.update_ratio = worst_update(moved, ref_moved)
    run.out_dtypes = {str(d) for d in record["out_dtypes"]}
    run.backward_autocast = any(bool(b) for b in record["backward_autocast"])
    run.stale = [bool(s) for s in record["stale"]]
    if record["out_grad_max"]:
        run.grad_scale = float(record["out_grad_max"][0]) / max(first.out_grad_max[0], 1e-30)
    run.calls = CallLog([Event(**event) for event in record["events"]])
    return run


def run_scenario(
    make_amp_step, name: str, snapshot: str, dtype: torch.dtype, seed: int = 2
) -> ScenarioRun:
    """One scenario in this process: `train_steps`, then `scenario_from` (the symptom table's
    way; the check runs the first as a probe, beside the learner's code)."""
    record = train_steps(make_amp_step, snapshot, dtype, seed)
    return scenario_from(wire.normalise(record), name, snapshot, dtype, seed)


def _loss_ratio(run: ScenarioRun) -> float:
    """The largest |returned / float32 - 1| over the steps, as a ratio (nan if not a number)."""
    worst = 1.0
    for got, want in run.returned:
        try:
            value = float(torch.as_tensor(got).detach().float().reshape(()))
        except (TypeError, RuntimeError, ValueError):
            return float("nan")
        ratio = value / want if want else float("inf")
        if abs(ratio - 1) > abs(worst - 1):
            worst = ratio
    return worst


def symptoms(make_amp_step, seed: int = 3) -> list[dict[str, object]]:
    """One row per scenario of what a step did, measured, for a learner to diagnose: the
    dtypes the forward produced, autocast during backward, steps skipped, the gradient
    reaching the output and the worst layer's update as multiples of float32's, the loss
    returned as a multiple of float32's. No cause is named: that is the exercise."""
    rows = []
    for name, snapshot, dtype in SCENARIOS:
        run = run_scenario(make_amp_step, name, snapshot, dtype, seed=seed)
        rows.append(
            {
                "scenario": name,
                "forward output": ", ".join(sorted(run.out_dtypes)) or "none",
                "autocast on in backward": run.backward_autocast,
                "steps skipped": f"{run.skipped}/{STEPS}",
                "output gradient / fp32": f"{run.grad_scale:.3g}x",
                "worst update / fp32": (
                    f"{run.update_ratio:.3g}x" if run.skipped < STEPS else "no step taken"
                ),
                "returned loss / fp32": f"{_loss_ratio(run):.3g}x",
            }
        )
        if run.refused:  # PyTorch stopped the run: its own words, the step it stopped at
            rows[-1]["PyTorch refused"] = f"step {len(run.returned) + 1}: {run.refused}"
    return rows


def symptom_table(make_amp_step, seed: int = 3) -> str:
    """`symptoms` as a Markdown table, one column per scenario."""
    rows = symptoms(make_amp_step, seed)
    keys = list(dict.fromkeys(k for r in rows for k in r if k != "scenario"))
    lines = ["| measured | " + " | ".join(r["scenario"] for r in rows) + " |"]
    lines.append("|---" * (len(rows) + 1) + "|")
    lines += [f"| {k} | " + " | ".join(str(r.get(k, "")) for r in rows) + " |" for k in keys]
    return "\n".join(lines)
