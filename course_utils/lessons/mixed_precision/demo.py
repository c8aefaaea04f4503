"""Lesson 04's workloads, numeric demos and plots: what fp16 and bf16 can hold, and what AMP
saves on this device.

Everything here runs on any device. The loss-scaling scenarios always run under fp16
autocast on the CPU, where they are exact and reproducible, because the numerics (range,
underflow, overflow) are those of the number format, not of the hardware.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ...device import amp_dtype, device_class, get_device
from ...measure import compare, steady_cpu
from ...memory import activation_bytes
from ...mode import pick

FORMATS = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def precision_table() -> list[dict]:
    """Range and precision of each format, from torch.finfo (subnormal = tiny * eps)."""
    rows = []
    for name, dtype in FORMATS.items():
        fi = torch.finfo(dtype)
        rows.append(
            {
                "dtype": name,
                "bits": fi.bits,
                "max": fi.max,
                "smallest normal": fi.tiny,
                "smallest subnormal": fi.tiny * fi.eps,
                "eps (1 + eps > 1)": fi.eps,
            }
        )
    return rows


def round_trip(values: list[float]) -> dict[str, list[float]]:
    """`values` stored in each format and read back as float64: what survives."""
    t = torch.tensor(values, dtype=torch.float64)
    return {name: t.to(dtype).double().tolist() for name, dtype in FORMATS.items()}


@functools.cache
def cpu_fp16_autocast() -> bool:
    """Whether this torch runs CPU autocast in float16 (added in torch 2.2); the loss-scaling
    scenarios need it. Without it autocast warns, disables itself, and runs float32."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.autocast("cpu", dtype=torch.float16):
            return (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.float16


# --- exercise 1: two snapshots of one regression model ---------------------------------------

SNAPSHOT_SCALE = {"early": 10.0, "late": 1e-3}  # size of outputs and targets; sets |gradient|


def snapshot(name: str, seed: int = 0) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """(model, x, y) of a small tanh MLP regressing y: `early` has large gradients (first steps,
    large errors), `late` tiny ones (near convergence, outputs and errors of order 1e-3)."""
    scale = SNAPSHOT_SCALE[name]
    torch.manual_seed(seed)
    widths = [32, 64, 64, 64]
    layers: list[nn.Module] = []
    for a, b in zip(widths, widths[1:], strict=False):
        layers += [nn.Linear(a, b), nn.Tanh()]
    model = nn.Sequential(*layers, nn.Linear(64, 1))
    with torch.no_grad():
        model[-1].weight.mul_(scale)
        model[-1].bias.zero_()
    x, y = 2 * torch.randn(256, 32), scale * torch.randn(256, 1)
    return model, x, y


def fp32_grads(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
    """The true gradients of the MSE loss, all in float32: what scaling must recover."""
    model.zero_grad(set_to_none=True)
    F.mse_loss(model(x), y).backward()
    grads = [p.grad.detach().clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    return grads


def plain_fp16_grads(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
    """The same gradients under fp16 autocast, without loss scaling: the baseline that fails."""
    model.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.float16):
        loss = F.mse_loss(model(x), y)
    loss.backward()
    grads = [p.grad.detach().clone() for p in model.parameters()]
    model.zero_grad(set_to_none=True)
    return grads


def grad_errors(grads, reference) -> list[float]:
    """Relative L2 error of each parameter's gradient against the fp32 reference (inf if the
    gradient is not finite, 1.0 if it is all zeros)."""
    errors = []
    for g, r in zip(grads, reference, strict=True):
        g = torch.as_tensor(g).detach().float()
        if not torch.isfinite(g).all():
            errors.append(float("inf"))
        else:
            errors.append(((g - r).norm() / r.norm().clamp_min(1e-30)).item())
    return errors


def zero_fraction(grads) -> float:
    """Fraction of gradient entries that are exactly zero (underflowed)."""
    flat = torch.cat([torch.as_tensor(g).detach().float().flatten() for g in grads])
    return (flat == 0).float().mean().item()


# --- dynamic loss scaling, observed ----------------------------------------------------------


@dataclass
class ScalerTrace:
    """What a GradScaler did, step by step: the scale used, and whether the step was skipped."""

    scale: list[float]
    skipped: list[bool]


def scaler_trace(steps: int = 40, overflow_at: tuple[int, ...] = (12, 13, 30)) -> ScalerTrace:
    """Drive a real torch.amp.GradScaler("cpu") with growth_interval=5 over `steps` steps of a
    one-weight model; at the steps in `overflow_at` the loss is inf, as an fp16 overflow makes it.
    """
    w = nn.Parameter(torch.ones(1))
    optimizer = torch.optim.SGD([w], lr=0.0)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10, growth_interval=5)
    trace = ScalerTrace([], [])
    for step in range(steps):
        loss = (w * (float("inf") if step in overflow_at else 1.0)).sum()
        scaler.scale(loss).backward()
        trace.scale.append(scaler.get_scale())
        scaler.step(optimizer)
        trace.skipped.append(not torch.isfinite(w.grad).all().item())
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
    return trace


# --- which precision each op runs in ----------------------------------------------------------


def autocast_dtypes(device: torch.device, dtype: torch.dtype) -> dict[str, str]:
    """Output dtype of common ops run on float32 inputs inside autocast(device, dtype)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(8, 16, generator=g).to(device)
    w = torch.randn(16, 16, generator=g).to(device)
    img = torch.randn(2, 3, 8, 8, generator=g).to(device)
    k = torch.randn(4, 3, 3, 3, generator=g).to(device)
    target = torch.zeros(8, dtype=torch.long, device=device)
    with torch.autocast(device.type, dtype=dtype):
        h = x @ w
        ops = {
            "matmul (x @ w)": h,
            "linear": F.linear(x, w),
            "conv2d": F.conv2d(img, k),
            "relu(matmul)": h.relu(),
            "sum(matmul)": h.sum(),
            "softmax(matmul)": h.softmax(-1),
            "layer_norm(matmul)": F.layer_norm(h, (16,)),
            "cross_entropy(matmul)": F.cross_entropy(h, target),
            "mse_loss(matmul)": F.mse_loss(h, torch.zeros_like(h)),
            "matmul + float32 tensor": h + x,
        }
    return {name: str(t.dtype).replace("torch.", "") for name, t in ops.items()}


# --- exercise 3: scores that need float32 --------------------------------------------------

SCORE_CASES = {"precision": (20.0, 0.02), "overflow": (40.0, 0.05)}  # (shared size, spread)


def score_inputs(case: str, seed: int = 0, n: int = 16, d: int = 64):
    """fp16 queries and keys as a fp16 layer under autocast hands them over: large activations
    sharing one direction, so every score q.k is large (~3e4 `precision`, ~1e5 `overflow`)
    while scores within a row differ by a few units. Softmax depends only on the differences."""
    shared, spread = SCORE_CASES[case]
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(d, generator=g)
    q = (shared * u + spread * torch.randn(n, d, generator=g)).half()
    k = (shared * u + spread * torch.randn(n, d, generator=g)).half()
    return q, k


def true_scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """softmax(q @ k.T) in float64: the reference."""
    return (q.double() @ k.double().T).softmax(-1)


def naive_scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """The model's original code: fine in float32, wrong under fp16 autocast."""
    return (q @ k.T).softmax(-1)


def score_error(fn, q, k, dtype=torch.float16) -> tuple[float, str]:
    """Largest probability error of fn(q, k) run under CPU autocast(dtype), and its dtype.
    (The float64 truth is computed inline: `true_scores` is an answer of exercise 2, which
    the grading kernel withholds.)"""
    with torch.autocast("cpu", dtype=dtype):
        out = fn(q, k)
    out = torch.as_tensor(out)
    error = (out.double() - (q.double() @ k.double().T).softmax(-1)).abs().max().item()
    return (error if error == error else float("inf")), str(out.dtype).replace("torch.", "")


# --- the AMP step, measured --------------------------------------------------------------------


def fp32_step(model: nn.Module, loss_fn, optimizer, max_norm: float) -> Callable:
    """The baseline: a plain float32 training step with gradient clipping."""

    def step(x, y):
        loss = loss_fn(model(x), y)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    return step


SPEED_LR = 1e-3  # SGD on the speed workload: small steps, the same for every step compared


def speed_workload(device: torch.device) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """An MLP whose step is all large matmuls: the work low precision speeds up. On a CPU one
    thread is used (steady_cpu); on a GPU it is sized so the GPU, not Python, is the limit
    (small CPU-bound networks see no speedup on GPUs: PyTorch's AMP recipe)."""
    torch.manual_seed(0)
    if device.type == "cuda":
        dim, hidden, batch = 1024, 4096, pick(quick=2048, full=4096)
    elif device_class(device) == "cpu":  # bf16 emulated: ~25x slower, measured with AVX2 only
        dim, hidden, batch = 256, 512, 64
    else:
        dim, hidden, batch = 512, pick(quick=1024, full=2048), pick(quick=256, full=512)
    model = nn.Sequential(
        nn.Linear(dim, hidden),
        nn.ReLU(),
        nn.Linear(hidden, hidden),
        nn.ReLU(),
        nn.Linear(hidden, hidden),
        nn.ReLU(),
        nn.Linear(hidden, 10),
    ).to(device)
    x = torch.randn(batch, dim, device=device)
    y = torch.randint(0, 10, (batch,), device=device)
    return model, x, y


@dataclass
class AmpEffect:
    """fp32 vs AMP on one workload: speed (interleaved pairs) and bytes saved for backward."""

    device_class: str
    dtype: str
    speedup: float
    fp32_bytes: int
    amp_bytes: int
    comparison: object
    # check 04-amp-step's record of what its timed AMP steps did: the worst layer's parameter
    # change against as many float32 steps (instrument.worst_update), and how many there were
    work_error: float | None = None
    work_steps: int = 0

    @property
    def bytes_ratio(self) -> float:
        return self.amp_bytes / self.fp32_bytes


def measure_amp(make_step: Callable, device=None, repeats: int | None = None) -> AmpEffect:
    """An AMP step (from `make_step`) against float32 on the speed workload: time per step in
    interleaved pairs, and the bytes each step saves for backward."""
    device = device or get_device()
    dtype = amp_dtype(device)  # bf16 on Ampere+ GPUs and CPUs, fp16 on older GPUs
    model, x, y = speed_workload(device)
    twin, loss_fn = copy.deepcopy(model), nn.CrossEntropyLoss()  # the same weights for both
    fp32 = fp32_step(model, loss_fn, torch.optim.SGD(model.parameters(), lr=SPEED_LR), 1.0)
    opt = torch.optim.SGD(twin.parameters(), lr=SPEED_LR)
    amp = make_step(twin, loss_fn, opt, device, dtype, 1.0)
    with steady_cpu():  # one CPU thread: steady timings on a shared CPU (no-op on a GPU)
        fp32_bytes = activation_bytes(lambda: fp32(x, y))  # saved-tensor hooks count them
        amp_bytes = activation_bytes(lambda: amp(x, y))
        # 2 warm-up pairs, then pairs in alternating order (AB, BA, ...), each timed between
        # two device synchronisations; the speedup is the median of the pairs' ratios
        labels, n = ("float32", f"autocast {str(dtype)[6:]}"), repeats or pick(quick=5, full=10)
        result = compare(
            lambda: fp32(x, y), lambda: amp(x, y), warmup=2, repeats=n, device=device, labels=labels
        )
    cls, name = device_class(device), str(dtype)[6:]
    return AmpEffect(cls, name, result.speedup, fp32_bytes, amp_bytes, result)


def amp_verdict(effect: AmpEffect) -> str:
    """What the measurement means on this device class, in a sentence or two (Markdown)."""
    text = (
        f"On this **{effect.device_class}** device, {effect.dtype} AMP ran the step "
        f"**{effect.speedup:.2f}x** as fast as float32 and kept **{effect.bytes_ratio:.2f}x** "
        "the bytes for backward. "
    )
    if effect.device_class == "cpu":
        return text + (
            "This CPU has no native bf16 (no avx512_bf16 or AMX): bf16 is emulated, so AMP "
            "cannot speed it up. Train in float32 here; only the memory saving is real."
        )
    if effect.device_class not in ("cuda-tensorcore", "cpu-bf16"):
        return text + "This device has no fast 16-bit math: memory is what AMP saves here."
    if effect.speedup >= 1.1:
        return text + "The device's fast 16-bit math pays off."
    return text + "Less than this device can do: a busy machine, or too little work per step."
