"""Probes timed on copies: what a change would be worth in this loop, measured both ways,
interleaved (`course_utils.measure.compare`). The learner's model and optimizer are never
touched: forward+backward runs on a deep copy with the inputs seen in the window and a
surrogate loss (the mean of the outputs: the backward pass costs the same), under the
autocast dtype the loop uses (`Context.loop_dtype`), the optimizer on copies of the
parameters with random gradients."""

from __future__ import annotations

import contextlib
import copy
import inspect
import warnings

import torch
from torch import nn
from torch.utils._pytree import tree_leaves, tree_map

from ..device import amp_dtype, cuda_capability, is_out_of_memory, release_cached_memory
from ..measure import compare
from .context import Context
from .findings import Finding
from .thresholds import step_gain, value

REPEATS = 10  # interleaved pairs per comparison (fewer when a step takes over 0.1 s)
# Each sample lasts at least this long (many calls of a sub-millisecond step): on a loaded
# machine a single 0.2 ms call is either preempted or not, and pair ratios of 0.98x and 9x
# came out of the same tiny-batch probe (2-core, load 10); 20 ms samples average that out.
MIN_SAMPLE_S = 0.02
AMP_CLASSES = ("cuda-tensorcore", "cpu-bf16")  # device classes where low precision pays


def _detached(tree):
    return tree_map(lambda t: t.detach() if torch.is_tensor(t) else t, tree)


def fwd_bwd(model: nn.Module, args: tuple, kwargs: dict, *, dtype=None, anomaly=False, fmt=None):
    """One forward+backward of `model` (a copy) on these inputs, as a zero-argument function."""
    device = next(model.parameters()).device
    if fmt is not None:
        args = tree_map(
            lambda t: t.to(memory_format=fmt) if torch.is_tensor(t) and t.dim() == 4 else t, args
        )

    def run():
        amp = torch.autocast(device.type, dtype=dtype) if dtype else contextlib.nullcontext()
        debug = torch.autograd.detect_anomaly(False) if anomaly else contextlib.nullcontext()
        with debug, amp:
            out = model(*args, **kwargs)
        outs = [t for t in tree_leaves(out) if torch.is_tensor(t) and t.is_floating_point()]
        sum(t.float().mean() for t in outs).backward()
        model.zero_grad(set_to_none=True)

    return run


def _copy(ctx: Context, fmt=None) -> nn.Module:
    model = copy.deepcopy(ctx.base_model).train()
    return model.to(memory_format=fmt) if fmt is not None else model


def _time_pair(ctx: Context, base, cand, labels) -> tuple[float, float]:
    """(speed-up of `cand` over `base`, seconds per call of `base`), interleaved pairs."""
    # a slow step gets fewer pairs, so that probing costs seconds, not minutes
    repeats = max(4, min(REPEATS, int(1.0 / max(ctx.window.step_s, 1e-3))))
    c = compare(
        base,
        cand,
        warmup=2,
        repeats=repeats,
        device=ctx.device,
        labels=labels,
        min_sample_s=MIN_SAMPLE_S,
    )
    return c.speedup, c.baseline.median


def anomaly_cost(ctx: Context) -> float | None:
    """Whole-step speed-up from turning anomaly detection off, or None when it is off."""
    if not ctx.window.seen.anomaly or not any(ctx.inputs):
        return None
    args, kwargs = _detached(ctx.inputs)
    m = _copy(ctx)
    with torch.autograd.set_detect_anomaly(False), warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Anomaly Detection has been enabled")
        s, part = _time_pair(
            ctx,
            fwd_bwd(m, args, kwargs, dtype=ctx.loop_dtype, anomaly=True),
            fwd_bwd(m, args, kwargs, dtype=ctx.loop_dtype),
            ("anomaly", "off"),
        )
    return step_gain(ctx.window.step_s, part, s)


def low_precision(ctx: Context) -> None:
    seen, dtype = ctx.window.seen, amp_dtype(ctx.device)
    if ctx.device_class not in AMP_CLASSES:
        ctx.not_checked.append(
            f"mixed precision: device class {ctx.device_class} has no fast low precision"
        )
        return
    used = {d for d in seen.autocast if d is not None}
    params = {p.dtype for p in ctx.base_model.parameters()}
    if used or params != {torch.float32}:
        ctx.ok.append(f"low precision in use ({', '.join(map(str, used or params))})")
        return
    if not any(ctx.inputs):
        ctx.not_checked.append("mixed precision: the model's inputs were not seen")
        return
    args, kwargs = _detached(ctx.inputs)
    m = _copy(ctx)
    base = fwd_bwd(m, args, kwargs)
    cand = fwd_bwd(m, args, kwargs, dtype=dtype)
    speedup, part = _time_pair(ctx, base, cand, ("fp32", "autocast"))
    gain = step_gain(ctx.window.step_s, part, speedup)
    tf32 = ctx.device.type == "cuda" and cuda_capability(ctx.device)[0] >= 8
    if gain < value("amp_gain"):
        ctx.ok.append(f"fp32 math: autocast({dtype}) measured {gain:.2f}x of the step here")
        return
    ctx.add(
        Finding(
            "fp32",
            "fp32 math on a device with fast low precision",
            f"forward+backward {speedup:.2f}x faster under autocast({dtype}) on a copy "
            f"({part * 1e3:.1f} ms of a {ctx.window.step_s * 1e3:.1f} ms step); "
            f"device class {ctx.device_class}",
            f"with torch.autocast('{ctx.device.type}', dtype={dtype}): forward and loss"
            + (" (and TF32 for what stays fp32)" if tf32 else "")
            + (" with torch.amp.GradScaler" if dtype == torch.float16 else ""),
            gain,
            "estimated",
            {"fwd_bwd_speedup": speedup, "fwd_bwd_s": part},
        )
    )


def _opt_impl(opt: torch.optim.Optimizer, device: torch.device) -> str:
    d = opt.defaults
    if d.get("fused"):
        return "fused"
    if d.get("foreach") or (d.get("foreach") is None and device.type == "cuda"):
        return "foreach"  # torch picks foreach for CUDA tensors when neither is given
    return "for-loop"


def _opt_copy(opt: torch.optim.Optimizer, **impl) -> torch.optim.Optimizer:
    params = [p.detach().clone().requires_grad_() for g in opt.param_groups for p in g["params"]]
    for p in params:
        p.grad = torch.randn_like(p) * 1e-3
    accepted = inspect.signature(type(opt).__init__).parameters  # AdamW's defaults name more
    kwargs = {k: v for k, v in {**opt.defaults, **impl}.items() if k in accepted}
    return type(opt)(params, **kwargs)


def optimizer_impl(ctx: Context) -> None:
    opt, device = ctx.optimizer, ctx.device
    impl = _opt_impl(opt, device)
    if impl == "fused" or "foreach" not in opt.defaults:
        ctx.ok.append(f"optimizer: {type(opt).__name__} ({impl})")
        return
    base = _opt_copy(opt)
    cand, cand_impl = None, "fused"
    try:
        if "fused" in opt.defaults:
            cand = _opt_copy(opt, foreach=None, fused=True)
            cand.step()
    except (RuntimeError, ValueError, TypeError):
        cand = None
    if cand is None:
        if impl == "foreach":
            ctx.ok.append(f"optimizer: {type(opt).__name__} (foreach; fused not supported here)")
            return
        cand, cand_impl = _opt_copy(opt, foreach=True), "foreach"
    speedup, part = _time_pair(ctx, base.step, cand.step, (impl, cand_impl))
    gain = step_gain(ctx.window.step_s, part, speedup)
    name = type(opt).__name__
    if gain < value("optimizer_gain"):
        ctx.ok.append(f"optimizer: {name} ({impl}); {cand_impl} measured {gain:.2f}x of the step")
        return
    ctx.add(
        Finding(
            "optimizer-loop",
            f"{name} runs its {impl} implementation",
            f"optimizer step {speedup:.2f}x faster {cand_impl} on copies of the parameters "
            f"({part * 1e3:.2f} ms of a {ctx.window.step_s * 1e3:.1f} ms step, "
            f"{len(base.param_groups[0]['params'])} tensors)",
            f"{name}(..., {cand_impl}=True)",
            gain,
            "estimated",
            {"impl": impl, "candidate": cand_impl, "opt_speedup": speedup, "opt_s": part},
        )
    )


def _batch_size(args: tuple, kwargs: dict) -> int | None:
    tensors = [t for t in tree_leaves((args, kwargs)) if torch.is_tensor(t) and t.dim() > 0]
    return tensors[0].shape[0] if tensors else None


def _scaled(tree, b: int, k: int):
    return tree_map(
        lambda t: torch.cat([t] * k) if torch.is_tensor(t) and t.dim() and t.shape[0] == b else t,
        tree,
    )


def batch_size(ctx: Context) -> None:
    args, kwargs = _detached(ctx.inputs)
    b = _batch_size(args, kwargs)
    if b is None:
        ctx.not_checked.append("batch size: the model's batched inputs were not seen")
        return
    m = _copy(ctx)
    base, ratios, oom = fwd_bwd(m, args, kwargs, dtype=ctx.loop_dtype), {}, None
    for k in (2, 4):
        try:
            big = fwd_bwd(m, *_scaled((args, kwargs), b, k), dtype=ctx.loop_dtype)
            ratios[k] = k * _time_pair(ctx, base, big, (f"batch {b}", f"batch {k * b}"))[0]
        except RuntimeError as e:  # out of memory at k x the batch: no headroom
            if not is_out_of_memory(e):
                raise
            release_cached_memory(ctx.device)
            oom = k * b
            break
    best = max(ratios, key=ratios.get, default=None)
    seen = ", ".join(f"{k * b}: {r:.2f}x" for k, r in ratios.items())
    room = f"; batch {oom} ran out of memory" if oom else ""
    # far below the knee: the best larger batch pays the threshold, and 2x agrees that
    # larger is faster (one noisy set of timings must not raise it alone)
    if best is None or ratios[best] < value("batch_gain") or ratios[2] < value("batch_agree"):
        ctx.ok.append(f"batch {b}: samples/s at larger batches {seen or 'not measured'}{room}")
        return
    ctx.add(
        Finding(
            "small-batch",
            "Batch far below the device's throughput knee",
            f"forward+backward samples/s on a copy, relative to batch {b}: {seen}{room}",
            f"batch {best * b} if memory allows; scale the learning rate with warm-up "
            "(and re-check accuracy)",
            ratios[best],
            "measured",
            {"batch": b, "throughput_ratio": ratios},
        )
    )


def has_conv(model: nn.Module) -> bool:
    return any(isinstance(m, nn.Conv2d) for m in model.modules())


def conv_layout(ctx: Context) -> None:
    """channels_last and cudnn.benchmark: worth checking on CUDA conv nets only."""
    model = ctx.base_model
    if not has_conv(model):
        return
    if not ctx.device_class.startswith("cuda"):  # by class, so that tests can fake a GPU
        ctx.not_checked.append(
            f"channels_last and cudnn.benchmark: they pay on CUDA GPUs, this is {ctx.device_class}"
        )
        return
    args, kwargs = _detached(ctx.inputs)
    weights = [m.weight for m in model.modules() if isinstance(m, nn.Conv2d)]
    cl = all(w.is_contiguous(memory_format=torch.channels_last) for w in weights)
    if ctx.device_class == "cuda-tensorcore" and not cl and any(ctx.inputs):
        a, b = _copy(ctx), _copy(ctx, torch.channels_last)
        s, part = _time_pair(
            ctx,
            fwd_bwd(a, args, kwargs, dtype=ctx.loop_dtype),
            fwd_bwd(b, args, kwargs, dtype=ctx.loop_dtype, fmt=torch.channels_last),
            ("NCHW", "NHWC"),
        )
        _layout_finding(
            ctx,
            "channels-last",
            s,
            part,
            "model.to(memory_format=torch.channels_last) and the inputs too",
        )
    fixed = len(set(ctx.window.seen.shapes)) == 1
    if not ctx.cudnn_benchmark and fixed and any(ctx.inputs):
        m = _copy(ctx)
        run = fwd_bwd(m, args, kwargs, dtype=ctx.loop_dtype)

        def off():
            torch.backends.cudnn.benchmark = False  # restored with the learner's flags
            run()

        def on():
            torch.backends.cudnn.benchmark = True
            run()

        s, part = _time_pair(ctx, off, on, ("benchmark off", "benchmark on"))
        _layout_finding(
            ctx,
            "cudnn-benchmark-off",
            s,
            part,
            "torch.backends.cudnn.benchmark = True (shapes are fixed)",
        )


def _precision(ctx: Context) -> str:
    return f"under autocast({ctx.loop_dtype}) as the loop" if ctx.loop_dtype else "in fp32"


def _layout_finding(ctx: Context, kind: str, speedup: float, part: float, fix: str) -> None:
    gain = step_gain(ctx.window.step_s, part, speedup)
    if gain < value("layout_gain"):
        ctx.ok.append(f"{kind}: would be {gain:.2f}x of the step here")
        return
    title = {
        "channels-last": "Conv net not in channels_last",
        "cudnn-benchmark-off": "cudnn.benchmark off with fixed shapes",
    }[kind]
    ctx.add(
        Finding(
            kind,
            title,
            f"forward+backward {speedup:.2f}x faster with the change, on a copy, {_precision(ctx)}",
            fix,
            gain,
            "estimated",
            {"fwd_bwd_speedup": speedup},
        )
    )
