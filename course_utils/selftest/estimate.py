"""How long each notebook would run here, full or quick, and whether that fits its budget.

A notebook's work is counted once per mode (`Cost`, from the notebook's sizes): the dense
FLOPs of its training and inference workloads, the number of small steps whose time is
launch and dispatch overhead more than arithmetic, and the seconds of host-only work (kernel
start, process launches, JPEG decoding, torch.compile) as measured on the reference machine
(2 vCPUs, AMD EPYC, `course report --quick`: docs/results/cpu-bf16-amd-epyc.json). On a
device with achieved FLOP/s R and host speed h (1 = the reference's):

    seconds = host_s * h + steps * STEP_OVERHEAD_S * h + gflop * 1e9 / R + amp_gflop * 1e9 / R16

R is the device's fp32 peak (data sheet for GPUs, the matmul probe on a CPU) times the share
that small course models reach; R16, for work run under autocast on tensor cores, the GPU's
16-bit tensor peak times its (smaller) share, and R on a CPU; h is measured by a dispatch
probe. The same estimator serves
`course selftest` (its report) and the auto mode (session.setup). It is an estimate: a
notebook's measured run time (`course report`) is the figure to trust.
"""

from __future__ import annotations

import functools
import time
from dataclasses import asdict, dataclass

from ..checks import Threshold

STEP_OVERHEAD_S = Threshold(
    1.5e-3,
    "host time per small training step (about 100 ops of dispatch or kernel launch at 10-15 "
    "us each); assumed from the profile of a SmallCNN step, not measured on a GPU",
)
GPU_AMP_EFFICIENCY = Threshold(
    0.10,
    "share of the 16-bit tensor-core data-sheet peak that autocast training of the course's "
    "conv nets reaches on a GPU not in GPU_AMP_SHARE; assumed, not measured on a GPU. On a "
    "T4 it is below NVIDIA's published AMP inference rate (ResNet-50 v1.5, 1,198 img/s x "
    "8.2 GFLOP = 9.8 TFLOP/s, 0.15 of 65), as training runs below inference",
)
# Published training rates, the nearest evidence to a measurement on these GPUs: NVIDIA's
# ResNet-50 v1.5 PyTorch training throughput on 1 GPU under AMP (DeepLearningExamples,
# PyTorch/Classification/ConvNets/resnet50v1.5/README.md), at 24.6 GFLOP per image (3 x 8.2
# forward). ResNet-9's wide 3x3 convs run at least as close to the peak (Myrtle's ResNet-9:
# about 0.35 of a V100's), so these shares are on the safe side for the capstone.
GPU_AMP_SHARE = {
    "A100": Threshold(0.19, "A100 80GB, AMP: 2,470 img/s = 60.8 TFLOP/s of 312"),
    "V100": Threshold(0.24, "V100 16GB, AMP: 1,200 img/s = 29.5 TFLOP/s of 125"),
}
GPU_EFFICIENCY = Threshold(
    0.25,
    "share of the fp32 data-sheet peak that the course's small models (SmallCNN, MLPs, "
    "ResNet-9 at batch 64-512) reach; assumed, not yet measured on a GPU",
)
CPU_EFFICIENCY = Threshold(
    0.5,
    "share of the 1024x1024 matmul probe's FLOP/s that conv and small matmul steps reach on "
    "the reference 2-vCPU EPYC (quick notebooks 01 and 09: 0.4-0.6)",
)
HOST_PROBE_REF_S = Threshold(
    0.009,
    "best of 5 runs of 2000 one-element torch.add on the reference 2-vCPU EPYC (0.008-0.012 s "
    "at load 4-5, n=3)",
)
CPU_MARGIN = Threshold(
    3.0,
    "the auto mode gives a CPU full mode only if 3x the estimate fits the budget. Before "
    "CPU_RATIO the model was off by 0.03x to over 4x per notebook in full mode; the ratios "
    "leave a CPU unlike the reference, and the probes feeding the model, which varied up to "
    "1.6x between runs here (04 full: 424 and 666 s modelled; docs/results/learner-path-"
    "cpu.md); one busy process made a 2-core Run All 1.3-1.7x slower (00 full 29 -> 38 s, 10 "
    "quick 33 -> 56 s: docs/results/learner-browser-untouched-cpu-bf16-amd-epyc.md). In "
    "doubt, quick",
    measured_on=("cpu-bf16",),
)
# On a CPU the model above runs short: convolutions at large batch reach far less than half of
# the matmul probe, and kernel start and imports are not counted. So a CPU's estimate is the
# model's times the ratio measured on the reference CPU: each learner copy's Run All over the
# model's estimate there, {notebook: (quick, full)}. A run stopped at its deadline gives a lower
# bound: max(1, bound / model), which may raise the model's estimate, never lower it. GPUs
# keep the model (not measured).
CPU_RATIO_SOURCE = "docs/results/learner-path-cpu.md"  # tests/test_estimate.py keeps them equal
CPU_RATIO: dict[str, tuple[float, float]] = {
    "00": (1.03, 0.61),
    "01": (2.09, 1.0),
    "02": (1.27, 1.0),
    "02b": (1.24, 1.0),
    "03": (0.78, 1.4),
    "04": (0.97, 0.03),
    "05": (1.09, 1.48),
    "06": (1.73, 0.82),
    "07": (0.91, 0.67),
    "08": (1.67, 1.29),
    "09": (0.99, 0.45),
    "10": (0.82, 1.9),
    "11": (1.12, 1.0),
    "12": (1.73, 0.53),
    "13": (1.04, 0.68),
    "14": (3.09, 4.34),
    "15": (0.65, 0.64),
    "16": (1.28, 0.48),
    "17": (0.81, 0.64),
    "18": (1.75, 1.0),
}
BUDGET_QUICK_S, BUDGET_FAST_GPU_S, BUDGET_S = 60.0, 120.0, 300.0
FAST_GPUS = ("A100", "H100", "H200", "GH200", "B200")


@dataclass(frozen=True)
class Cost:
    """One notebook's work in one mode, counted from its sizes (see the module docstring)."""

    gflop: float
    steps: int
    host_s: float
    amp_gflop: float = 0.0  # the share of the FLOPs run under autocast (tensor cores on GPUs)


@dataclass(frozen=True)
class NotebookCost:
    quick: Cost
    full: Cost
    evidence: str
    full_budget_s: tuple[float, float] | None = None  # (T4-class, A100/H100-class); None: BUDGET_S


# Counted from each notebook's cu.pick sizes; FLOPs of one step by FlopCounterMode (MLP
# 512-1024x4 at batch 1024: 21.5 GFLOP; SmallCNN(32) at 128: 7.7; SmallCNN(16) at 64: 1.0;
# ResNet-9 at 64: 145; ResNet-9(64) at 512: 1,163), times the steps the notebook runs; host
# seconds = the quick run's measured seconds minus its FLOPs and steps on the reference.
COSTS = {
    "00": NotebookCost(Cost(140, 60, 8), Cost(2_200, 200, 10), "MLP steps: ~25 quick, ~100 full"),
    "01": NotebookCost(
        Cost(900, 1_000, 9), Cost(200_000, 20_500, 15), "10 runs of 2000 SmallCNN(32) steps full"
    ),
    "02": NotebookCost(
        Cost(90, 1_500, 10),
        Cost(7_500, 1_500, 12),
        "throughput sweeps (~15 timed calls per size): MLP 256-512x3 to batch 1024 quick (4 "
        "MFLOP a sample), SmallCNN(32) to 4096 full (60); the regression's SGD and noise-scale "
        "gradients as small steps",
    ),
    "02b": NotebookCost(
        Cost(450, 1_500, 10),
        Cost(160_000, 2_000, 12),
        "LARS/LAMB/AdamW race: 12 runs of ~45 MLP steps at batch 1024 quick (0.8 GFLOP a step "
        "with its test pass), ~100 SmallCNN(16) steps at batch 8192 full (139 GFLOP); step times "
        "at 4 batches; the regression's SGD as small steps",
    ),
    "03": NotebookCost(
        Cost(50, 680, 20),
        Cost(1_000, 4_400, 140),
        "JPEG decoding: 4x the images, 5 worker counts; tip 17 grid: 4x120 SmallCNN(8) steps at "
        "16 px quick, 12x300 at 32 px full",
    ),
    "04": NotebookCost(Cost(64, 60, 8), Cost(40_000, 60, 10), "speed MLP 1024-4096, batch 4096"),
    "05": NotebookCost(Cost(50, 100, 14), Cost(300, 300, 80), "full compiles SE-ResNet (inductor)"),
    "06": NotebookCost(Cost(10, 200, 25), Cost(30, 600, 40), "three torchrun launches"),
    "07": NotebookCost(Cost(20, 200, 13), Cost(60, 500, 20), "small blocks; segment sweep"),
    "08": NotebookCost(Cost(10, 1_200, 6), Cost(30, 3_200, 8), "8 RNN runs of 150 / 400 steps"),
    "09": NotebookCost(Cost(300, 120, 10), Cost(3_000, 300, 12), "ResNet-9 eval at 16 / 64"),
    "10": NotebookCost(Cost(5, 600, 33), Cost(20, 2_000, 90), "profiled Python loops: host-bound"),
    "12": NotebookCost(
        Cost(130, 200, 15),
        Cost(2_500, 300, 110),
        "TinyGPT steps (FlopCounterMode: 0.70 GFLOP at 8 x 128 quick, 20.1 at 16 x 256 full), "
        "padded and packed epochs, three-way precision rounds; full compiles a block (Inductor)",
    ),
    "13": NotebookCost(
        Cost(5, 150, 25),
        Cost(10, 400, 45),
        "one launch of 2 processes (4 plans, 3 strategies, 2 precision policies, a checkpoint; "
        "3 timing rounds of 1 step quick, 7 of 3 full) and 4 pretend-world peaks: host-bound",
    ),
    "15": NotebookCost(
        Cost(1, 0, 15),
        Cost(1, 0, 15),
        "one GPT of 2 blocks (width 64, batch 4 x 128) stepped about 12 times under dispatch "
        "modes that count bytes and FLOPs (none, selective, full, offload; the check's replay), "
        "float8 casts of a few 256 x 256 tensors: host-bound, the same in both modes",
    ),
    "16": NotebookCost(
        Cost(1, 100, 40),
        Cost(2, 200, 80),
        "one launch of 2 processes (a block split 3 ways; GPipe and 1F1B at 4 and 8 "
        "micro-batches, sleeps standing for a device), full adds one of 4; exercise 3's launch "
        "of 2; 5 layouts counted on a pretend world: host-bound",
    ),
    "17": NotebookCost(
        Cost(1, 0, 12),
        Cost(2, 0, 15),
        "attention's peak memory at 3 (quick) or 4 (full, T up to 2048) lengths, operators "
        "counted on the meta device, and small Triton kernels run in the interpreter on the CPU "
        "(about 10 checks' worth of interpreted launches): host-bound",
    ),
    "18": NotebookCost(
        Cost(750, 700, 10),
        Cost(50_000, 1_700, 20),
        "the GPT's training steps, 6 x parameters (0.12M quick, 0.85M full) x tokens: the "
        "baseline's first tenth (400 steps of 8 x 128 quick, 1,200 of 8 x 256 full: 0.25 and "
        "12.5 TFLOP) and the ablation's variants of the reference (up to 4 of 50 steps of "
        "16 x 128 quick, 100 of 64 x 256 full: 0.5 and 33 TFLOP), one thread on a CPU",
    ),
}  # "11": course_utils/lessons/capstone/selftest.py COST, counted from the capstone's sizes


@dataclass
class Rates:
    """How fast this device is for the estimator, and where each figure came from."""

    flops: float  # achieved FLOP/s on the course's workloads
    host: float  # host speed factor: 1 = the reference machine, 2 = twice as slow
    source: str
    amp_flops: float | None = None  # achieved FLOP/s under autocast; None: `flops`


@functools.cache
def host_probe_s() -> float:
    """Seconds for 2000 dispatches of a tiny CPU op (best of 5): the host's speed."""
    import torch

    x = torch.zeros(1)
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(2000):
            x.add(1.0)
        best = min(best, time.perf_counter() - t0)
    return best


def rates(env: dict) -> Rates:
    """This device's rates: data-sheet fp32 peak for GPUs, the probes on a CPU."""
    from ..device import peak_flops

    host = min(4.0, max(0.25, host_probe_s() / HOST_PROBE_REF_S.value))
    if env.get("device", "cpu").startswith("cuda"):
        return gpu_rates(env.get("device_name", ""), host)
    if env.get("device", "cpu") == "cpu":
        peak = peak_flops("cpu")
        return Rates(
            peak * CPU_EFFICIENCY.value,
            host,
            f"matmul probe {peak / 1e9:.0f} GFLOP/s x {CPU_EFFICIENCY.value}",
        )
    return Rates(1e12, host, f"{env.get('device')}: no peak known, 1 TFLOP/s assumed")


def gpu_rates(device_name: str, host: float = 1.0) -> Rates:
    """A GPU's rates from its data sheet (a T4's where the name is unknown) and the shares
    above; `host`: the host speed factor (1: a host as fast as the reference's 2 vCPUs)."""
    import torch

    from ..device import GPU_PEAK_FLOPS, gpu_peak_flops

    peak = gpu_peak_flops(device_name)
    if peak is None:
        peak = GPU_PEAK_FLOPS["T4"][0]
        how = f"{device_name} not in the data-sheet table: a T4's fp32 peak"
    else:
        how = f"data-sheet fp32 peak {peak / 1e12:.1f} TFLOP/s"
    half = gpu_peak_flops(device_name, torch.float16) or GPU_PEAK_FLOPS["T4"][2]
    share = amp_share(device_name).value
    how += f" x {GPU_EFFICIENCY.value}; 16-bit {half / 1e12:.0f} x {share}"
    return Rates(peak * GPU_EFFICIENCY.value, host, how, half * share)


def amp_share(device_name: str) -> Threshold:
    """The share of its 16-bit peak a GPU reaches under autocast: published where known."""
    from ..device import match_gpu

    key = match_gpu(device_name, GPU_AMP_SHARE)
    return GPU_AMP_SHARE[key] if key else GPU_AMP_EFFICIENCY


def budget_s(env: dict, quick: bool, nc: NotebookCost | None = None) -> float:
    """The per-notebook budget: quick 60 s anywhere; full 2 min on A100/H100-class GPUs,
    5 min elsewhere (T4-class), unless the notebook has its own (`full_budget_s`)."""
    if quick:
        return BUDGET_QUICK_S
    name = str(env.get("device_name", "")).upper()
    fast = env.get("device", "").startswith("cuda") and any(g in name for g in FAST_GPUS)
    slow_s, fast_s = (nc and nc.full_budget_s) or (BUDGET_S, BUDGET_FAST_GPU_S)
    return fast_s if fast else slow_s


def cost_of(prefix: str) -> NotebookCost | None:
    """The notebook's cost: the lesson's own `selftest.COST` if it has one, else COSTS."""
    from .items import LESSONS, lesson_selftest

    try:
        own = getattr(lesson_selftest(prefix), "COST", None) if prefix in LESSONS else None
    except ModuleNotFoundError as exc:  # the learner edition ships only the selftests with a COST
        if exc.name != f"course_utils.lessons.{LESSONS[prefix][1]}.selftest":
            raise
        own = None
    return own or COSTS.get(prefix)


def seconds(cost: Cost, r: Rates) -> float:
    return (
        cost.host_s * r.host
        + cost.steps * STEP_OVERHEAD_S.value * r.host
        + cost.gflop * 1e9 / r.flops
        + cost.amp_gflop * 1e9 / (r.amp_flops or r.flops)
    )


def estimate(prefix: str, env: dict, *, quick: bool, r: Rates | None = None) -> dict | None:
    """Estimated run time of notebook `prefix` here in one mode, against its budget."""
    nc = cost_of(prefix)
    if nc is None:
        return None
    r = r or rates(env)
    cost = nc.quick if quick else nc.full
    on_gpu = str(env.get("device", "cpu")).startswith("cuda")
    ratio = 1.0 if on_gpu else CPU_RATIO.get(prefix, (1.0, 1.0))[0 if quick else 1]
    est = seconds(cost, r) * ratio
    limit = budget_s(env, quick, nc)
    margin = 1.0 if on_gpu else CPU_MARGIN.value
    return {
        "notebook": prefix,
        "mode": "quick" if quick else "full",
        "estimate_s": est,
        "budget_s": limit,
        "over_budget": est > limit,
        "margin": margin,  # the auto mode runs full only where estimate x margin fits
        "fits_with_margin": est * margin <= limit,
        "cost": asdict(cost),
        "cpu_ratio": ratio,  # measured over modelled on the reference CPU; 1 on a GPU
        "evidence": nc.evidence,
        "rates": asdict(r),
    }


def estimates(items, records: dict, env: dict, *, quick: bool) -> list[dict]:
    """Full-mode (and quick-mode) estimates for each notebook under test, with the seconds
    its self-test items took here."""
    from .items import LESSONS

    r = rates(env)
    rows = []
    for prefix in dict.fromkeys(i.lesson for i in items if i.lesson in LESSONS):
        full = estimate(prefix, env, quick=False, r=r)
        if full is None:
            continue
        measured = sum(
            records[i.key].get("seconds", 0.0)
            for i in items
            if i.lesson == prefix and i.key in records
        )
        quick_est = estimate(prefix, env, quick=True, r=r)
        full.update(
            notebook=LESSONS[prefix][0],
            quick_estimate_s=quick_est["estimate_s"],
            selftest_s=measured,
            selftest_mode="quick" if quick else "full",
            quick_over_budget=quick_est["over_budget"],
        )
        rows.append(full)
    return rows
