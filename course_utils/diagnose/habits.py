"""Findings read from the window itself: loading, syncs, gradient zeroing, debug switches,
DDP without no_sync, cuDNN autotuning and shapes. Each takes a Context and adds to it."""

from __future__ import annotations

import os

import torch
from torch import nn

from .context import Context
from .findings import Finding
from .thresholds import value


def loader_settings(loader) -> dict | None:
    if not isinstance(loader, torch.utils.data.DataLoader):
        return None
    return {
        "num_workers": loader.num_workers,
        "pin_memory": loader.pin_memory,
        "persistent_workers": loader.persistent_workers,
    }


def data_bound(ctx: Context) -> None:
    w = ctx.window
    gain, share = w.step_s / max(w.compute_s, 1e-9), w.wait_s / max(w.step_s, 1e-9)
    settings = loader_settings(ctx.loader)
    seen = ", ".join(f"{k}={v}" for k, v in settings.items()) if settings else "not a DataLoader"
    if gain < value("data_gain") or share < value("data_wait"):
        ctx.ok.append(f"data loading: {share:.0%} of the step waiting for batches ({seen})")
        return
    cuda = ctx.device.type == "cuda"
    if settings and settings["num_workers"] == 0:
        workers = max(1, min(4, (os.cpu_count() or 2) - 1))
        pin = ", pin_memory=True" if cuda else ""
        fix = f"DataLoader(..., num_workers={workers}, persistent_workers=True{pin}); then measure"
    elif settings and cuda and not settings["pin_memory"]:
        fix = "DataLoader(..., pin_memory=True) and .to(device, non_blocking=True)"
    else:
        fix = "more workers if cores are idle, or decode/augment on the device (lesson 03)"
    ctx.add(
        Finding(
            "data-bound",
            "Steps wait for the data loader",
            f"{w.wait_s * 1e3:.1f} of {w.step_s * 1e3:.1f} ms per step in next(loader) "
            f"({share:.0%}); the same steps on batches already loaded take "
            f"{w.compute_s * 1e3:.1f} ms; loader: {seen}",
            fix,
            gain,
            "measured",
            {"step_s": w.step_s, "compute_s": w.compute_s, "wait_s": w.wait_s, **(settings or {})},
        )
    )


def syncs(ctx: Context) -> None:
    w = ctx.window
    per_step = sum(w.syncs.values()) / w.spy_steps
    calls = ", ".join(f"{n} x {name}" for name, n in w.syncs.most_common(4)) or "none"
    cuda = "" if w.cuda_syncs is None else f"; the CUDA runtime reported {w.cuda_syncs}"
    if per_step < value("syncs_per_step"):
        ctx.ok.append(f"host-device syncs: {per_step:.1f} per step from your code{cuda}")
        return
    cost = (
        "each one stalls the host until the GPU's queue drains"
        if ctx.device.type != "cpu"
        else "counted, not timed: on a CPU nothing runs asynchronously, so they cost nothing "
        "here, but each one stalls a GPU's queue"
    )
    ctx.add(
        Finding(
            "syncs",
            "Host-device syncs inside the step",
            f"{per_step:.1f} per step from your code ({calls} in {w.spy_steps} steps){cuda}; "
            f"{cost}",
            "keep losses and metrics as device tensors; read them once every N steps "
            "(torch.stack(losses).tolist())",
            data={"per_step": per_step, "calls": dict(w.syncs), "cuda_syncs": w.cuda_syncs},
        )
    )


def grads_zeroed(ctx: Context) -> None:
    labels = ctx.window.grads
    if not labels:
        ctx.not_checked.append("gradient zeroing: the model's forward ran only once")
    elif "zero" in labels:
        ctx.add(
            Finding(
                "grads-zeroed",
                "Gradients zeroed as tensors, not set to None",
                f"{labels.count('zero')} of {len(labels)} forwards started with every .grad "
                "an all-zero tensor: a memset per parameter, then an add instead of a write",
                "optimizer.zero_grad() (set_to_none=True, the default since PyTorch 2.0)",
                data={"grad_states": labels},
            )
        )
    else:
        ctx.ok.append(f"gradients: {', '.join(sorted(set(labels)))} at the start of forwards")


def debug_switches(ctx: Context, anomaly_gain: float | None) -> None:
    seen = ctx.window.seen
    if seen.anomaly:
        measured = f"; step {anomaly_gain:.2f}x faster without it" if anomaly_gain else ""
        ctx.add(
            Finding(
                "anomaly-on",
                "Autograd anomaly detection is on",
                f"torch.is_anomaly_enabled() was True during forward{measured}",
                "torch.autograd.set_detect_anomaly(False) outside debugging",
                anomaly_gain,
                "estimated" if anomaly_gain else "not measured",
            )
        )
    if seen.profiler:
        ctx.add(
            Finding(
                "profiler-on",
                "A profiler is recording the training steps",
                "torch's autograd profiler was enabled during forward",
                "profile a few steps with torch.profiler.schedule, then stop it",
            )
        )
    if not (seen.anomaly or seen.profiler):
        ctx.ok.append("debug switches: anomaly detection and profiler off")


def ddp_no_sync(ctx: Context) -> None:
    seen = ctx.window.seen
    if not isinstance(ctx.model, nn.parallel.DistributedDataParallel):
        return
    if not seen.optimizer_steps:
        ctx.not_checked.append("DDP no_sync: no optimizer step was seen in the window")
        return
    per_step = seen.forwards / seen.optimizer_steps
    if per_step <= 1 or not all(seen.ddp_sync):
        why = "no accumulation" if per_step <= 1 else "no_sync used"
        ctx.ok.append(f"DDP: {per_step:.1f} forwards per optimizer step, {why}")
        return
    ctx.add(
        Finding(
            "ddp-no-sync",
            "Accumulation under DDP all-reduces every micro-batch",
            f"{per_step:.1f} forwards per optimizer step, each with require_backward_grad_sync"
            f"=True: {per_step - 1:.1f} of {per_step:.1f} all-reduces per step are wasted",
            "wrap all but the last micro-batch in `with model.no_sync():`",
            data={"forwards_per_step": per_step},
        )
    )


def cudnn_shapes(ctx: Context, has_conv: bool) -> None:
    """Only the changing-shapes case: benchmark off with fixed shapes is timed in probes."""
    if not ctx.device_class.startswith("cuda") or not has_conv:
        return
    shapes = ctx.window.seen.shapes
    distinct = len(set(shapes))
    if ctx.cudnn_benchmark and distinct > max(2, len(shapes) // 2):
        ctx.add(
            Finding(
                "cudnn-benchmark-changing-shapes",
                "cudnn.benchmark on while input shapes change",
                f"{distinct} distinct input shapes in {len(shapes)} forwards: each new shape "
                "is autotuned again",
                "fix the shapes (pad or bucket to a few sizes), or cudnn.benchmark = False",
                data={"distinct_shapes": distinct, "forwards": len(shapes)},
            )
        )
