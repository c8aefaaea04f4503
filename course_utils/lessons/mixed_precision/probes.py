"""Lesson 04's probes: each builds its specimen from plain arguments (a snapshot by name and
seed, score inputs by case and seed, the speed workload of a device), runs the learner's
answer beside it (in the learner's kernel under `course grade`) with the lesson's instruments
around it, and returns what it saw as data (course_utils.probes). The checks (checks.py,
island.py, scenarios.py) compute what that data must equal themselves."""

from __future__ import annotations

import contextlib

import torch
from torch import nn

from ...memory import activation_bytes
from ...probes import probe
from . import demo
from .island import OpPrecisions
from .scenarios import train_steps


def _dtype(name: str) -> torch.dtype:
    return {"float16": torch.float16, "bfloat16": torch.bfloat16}[name]


# --- exercise 1: loss scaling by hand --------------------------------------------------------


@probe
def rescued_reading(rescued_grads, snapshot: str, seed: int, stale: bool) -> dict:
    """The learner's gradients on demo.snapshot(snapshot, seed), whether its Linear layers
    produced float16 outputs, and (`stale`) with .grad filled as a previous step would have
    left it: an answer must not add onto it. Per backward pass through the model's output:
    the largest gradient reaching the output (the check divides by float32's to read the loss
    scale used) and whether .grad already held inf/NaN when it began (a failed try left in
    place); and the dtype of each gradient returned."""
    model, x, y = demo.snapshot(snapshot, seed=seed)
    if stale:
        for p in model.parameters():
            p.grad = torch.full_like(p, 0.01)
    seen: list[torch.dtype] = []
    passes: list[dict] = []

    def on_output_grad(grad: torch.Tensor) -> None:  # backward reaches the output first
        passes.append(
            {
                "out_grad_max": grad.detach().abs().max().float().item(),
                "nonfinite_grad": any(
                    p.grad is not None and not bool(torch.isfinite(p.grad).all())
                    for p in model.parameters()
                ),
            }
        )

    def on_output(module, args, out) -> None:
        if isinstance(out, torch.Tensor) and out.requires_grad:
            out.register_hook(on_output_grad)

    hooks = [
        m.register_forward_hook(lambda m, i, o: seen.append(o.dtype))
        for m in model.modules()
        if isinstance(m, nn.Linear)
    ]
    hooks.append(model.register_forward_hook(on_output))
    try:
        grads = list(rescued_grads(model, x, y))
    finally:
        for h in hooks:
            h.remove()
    return {
        "grads": grads,
        "fp16": bool(seen) and all(d == torch.float16 for d in seen),
        "passes": passes,
        "dtypes": [
            str(getattr(g, "dtype", type(g).__name__)).removeprefix("torch.") for g in grads
        ],
    }


# --- exercise 2: a float32 island ------------------------------------------------------------


@probe
def island_reading(
    stable_scores, case: str, seed: int, autocast: bool, cast: bool, tolerate: bool
) -> dict:
    """The learner's scores for demo.score_inputs(case, seed) (`cast`: as float32), under CPU
    fp16 autocast or without any, and the precision each of its operations computed in;
    `tolerate`: an exception is a reading (`raised`), for the probes that only explain."""
    q, k = demo.score_inputs(case, seed=seed)
    if cast:
        q, k = q.float(), k.float()
    seen = OpPrecisions()
    region = torch.autocast("cpu", dtype=torch.float16) if autocast else contextlib.nullcontext()
    try:
        with region, seen:
            out = torch.as_tensor(stable_scores(q, k))
    except Exception:
        if not tolerate:
            raise
        return {"raised": True, "ops": seen.to_data()}
    return {"out": out, "ops": seen.to_data()}


# --- exercise 3: the AMP step ----------------------------------------------------------------


@probe
def scenario_reading(make_amp_step, snapshot: str, dtype: str, seed: int) -> dict:
    """scenarios.train_steps: the learner's step on one scenario, and what it did."""
    return train_steps(make_amp_step, snapshot, _dtype(dtype), seed)


# The AMP steps the speed part times: kept here between its calls (the step's GradScaler and
# the model it trains persist, as in a training run), by the key the check chose.
_BENCHES: dict[str, tuple] = {}


@probe
def amp_bench_step(make_amp_step, key: str, device: str, dtype: str, count_bytes: bool) -> dict:
    """One step of the learner's AMP step on the speed workload (made on the first call for
    `key`, a copy of demo.speed_workload's model), on one CPU thread where the device is a
    CPU; `count_bytes`: the bytes autograd saved for backward during it."""
    device = torch.device(device)
    bench = _BENCHES.get(key)
    if bench is None:
        model, x, y = demo.speed_workload(device)
        opt = torch.optim.SGD(model.parameters(), lr=demo.SPEED_LR)
        step = make_amp_step(model, nn.CrossEntropyLoss(), opt, device, _dtype(dtype), 1.0)
        bench = _BENCHES[key] = (model, step, x, y)
    _, step, x, y = bench
    threads = torch.get_num_threads()
    if device.type == "cpu":
        torch.set_num_threads(1)
    try:
        if count_bytes:
            return {"bytes": activation_bytes(lambda: step(x, y))}
        step(x, y)
        return {}
    finally:
        torch.set_num_threads(threads)


@probe
def amp_bench_done(make_amp_step, key: str) -> dict:
    """The weights the learner's step trained under `key` (the work the timed steps did)."""
    bench = _BENCHES.pop(key, None)
    if bench is None:
        return {"params": []}
    return {"params": [p.detach().float().cpu() for p in bench[0].parameters()]}
