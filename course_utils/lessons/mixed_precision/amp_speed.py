"""Check 04-amp-step's speed part: the learner's AMP step, one step per probe call in its
kernel, against float32 steps run here on the speed workload, in interleaved pairs timed
here; the bytes each saves for backward; and the work the timed steps did, their weights
against a float32 replay of as many steps run here."""

from __future__ import annotations

import copy
import uuid

import torch
from torch import nn

from ...checks import correct
from ...device import amp_dtype, device_class
from ...measure import compare, steady_cpu
from ...memory import activation_bytes
from ...probes import LearnerRaised, observe
from . import demo
from .instrument import params, worst_update
from .probes import amp_bench_done, amp_bench_step


def _bench_done(make_amp_step, key: str) -> list:
    """The weights the learner's timed steps trained (empty if its code failed there)."""
    try:
        return list(observe(amp_bench_done, make_amp_step, key)["params"])
    except LearnerRaised:
        return []


def measure_speed(make_amp_step, device: torch.device, repeats: int) -> demo.AmpEffect:
    """The learner's AMP step (in its kernel, a step per probe) against float32 steps run
    here, on the speed workload, in interleaved pairs timed here; the bytes each saves for
    backward; and the work its timed steps did: their weights against a float32 replay of
    as many steps, here (`work_error`, worst_update's error)."""
    dtype = amp_dtype(device)  # bf16 on Ampere+ GPUs and CPUs, fp16 on older GPUs
    name = str(dtype).removeprefix("torch.")
    model, x, y = demo.speed_workload(device)
    start, twin, loss_fn = params(model), copy.deepcopy(model), nn.CrossEntropyLoss()
    fp32 = demo.fp32_step(
        model, loss_fn, torch.optim.SGD(model.parameters(), lr=demo.SPEED_LR), 1.0
    )
    key, steps = uuid.uuid4().hex, [0]

    def amp(count_bytes: bool = False) -> dict:
        steps[0] += 1
        return observe(amp_bench_step, make_amp_step, key, str(device), name, count_bytes)

    try:
        with steady_cpu():  # one CPU thread: steady timings on a shared CPU (no-op on a GPU)
            fp32_bytes = activation_bytes(lambda: fp32(x, y))  # saved-tensor hooks count them
            amp_bytes = int(amp(count_bytes=True)["bytes"])
            labels = ("float32", f"autocast {name}")
            result = compare(
                lambda: fp32(x, y), amp, warmup=2, repeats=repeats, device=device, labels=labels
            )
    finally:
        trained = _bench_done(make_amp_step, key)
    replay = demo.fp32_step(
        twin, loss_fn, torch.optim.SGD(twin.parameters(), lr=demo.SPEED_LR), 1.0
    )
    with steady_cpu():
        for _ in range(steps[0]):
            replay(x, y)
    if len(trained) == len(start):
        moved = [
            torch.as_tensor(t).float().cpu() - s.float().cpu()
            for t, s in zip(trained, start, strict=True)
        ]
        ref_moved = [
            p.float().cpu() - s.float().cpu() for p, s in zip(params(twin), start, strict=True)
        ]
        work, _ = worst_update(moved, ref_moved)
    else:
        work = float("inf")
    effect = demo.AmpEffect(
        device_class(device), name, result.speedup, fp32_bytes, amp_bytes, result
    )
    effect.work_error, effect.work_steps = work, steps[0]
    return effect


def work_part(effects: list[demo.AmpEffect], tol: float) -> list:
    """The timed steps trained the model as float32 steps do, within `tol` (THRESHOLDS'
    work_error); none when no measurement recorded its work (a faked one)."""
    measured = [e for e in effects if e.work_error is not None]
    if not measured:
        return []
    worst = max(measured, key=lambda e: e.work_error if e.work_error == e.work_error else 1e30)
    ok = worst.work_error <= tol
    message = (
        f"after the {worst.work_steps} steps timed, the worst layer's parameter change differs "
        f"from {worst.work_steps} float32 steps by {worst.work_error:.3g} (allowed {tol})"
    )
    if not ok:
        message += ": the timed steps must train the model, as your step does in the scenarios"
    return [
        correct(
            "timed steps trained",
            ok,
            message,
            value=worst.work_error,
            threshold=tol,
            better="lower",
        )
    ]
