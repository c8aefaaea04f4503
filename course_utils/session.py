"""What every notebook calls first: set the mode, seed, and say where we are running."""

from __future__ import annotations

import os
import random

import numpy as np
import torch

from . import mode, skipping
from .answers import withheld_names
from .data import dataset_source
from .device import env_info, get_device, peak_flops


def seed_everything(seed: int = 0) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def env(verbose: bool = True) -> dict:
    """Device, class, versions, peak FLOP/s and the data set in use; printed as a table."""
    device = get_device()
    info = env_info(device)
    peak, conv_peak = peak_flops(device), peak_flops(device, op="conv")
    info["peak_flops"], info["peak_flops_conv"] = peak, conv_peak
    info["dataset"] = dataset_source()
    info["quick"] = mode.is_quick()
    decision = mode.auto_decision()  # set by setup only when the auto mode decided
    if decision is not None:
        info["mode"] = {
            "quick": decision.quick,
            "source": decision.source,
            "reason": decision.reason,
        }
    if verbose:
        rows = [
            ("device", f"{info['device']} ({info['device_name']})"),
            ("device class", info["device_class"]),
            ("torch / CUDA", _torch_cuda(info)),
            ("TF32", _tf32_line(info)),
            ("threads", f"{info['threads']} of {info['cpu_count']} CPUs"),
            (_peak_label(info, "matmul"), _tflops(peak)),
            *([(_peak_label(info, "cudnn"), _tflops(conv_peak))] if conv_peak != peak else []),
            ("data", info["dataset"]),
            ("quick mode", _mode_line(info)),
        ]
        from .compat import TORCH_FLOOR, below_floor

        missing = below_floor(torch.__version__)
        if missing:
            rows.append(
                (
                    f"below torch {TORCH_FLOOR}",
                    "; ".join(missing) + f": pip install 'torch>={TORCH_FLOOR}'",
                )
            )
        width = max(len(k) for k, _ in rows)
        print("\n".join(f"{k:>{width}}: {v}" for k, v in rows))
        print(f"{'':>{width}}  {SWITCH}")
    return info


SWITCH = (
    "to choose: set quick = True (or False) in the parameters cell at the top and run from "
    "there (in Colab too); or start Jupyter with COURSE_QUICK=1 (or 0)"
)


def _torch_cuda(info: dict) -> str:
    """The CUDA version only where a GPU uses it: a CUDA build on a CPU-only machine says so."""
    if info["device"].startswith("cuda"):
        return f"{info['torch']} / {info['cuda']}"
    build = f" (a CUDA {info['cuda']} build)" if info.get("cuda") else ""
    return f"{info['torch']}{build} / no GPU"


def _tf32_line(info: dict) -> str:
    """Whether float32 matmuls and convolutions may run on TF32 tensor cores (notebook 04)."""
    tf32 = info.get("tf32")
    if not info["device"].startswith("cuda"):
        return "not used (a CUDA tensor-core format; this device runs float32 as float32)"
    if not isinstance(tf32, dict):
        return "not supported by this GPU (it needs compute capability 8.0 or newer)"
    state = {True: "on", False: "off"}
    return f"matmul {state[bool(tf32['matmul'])]}, cuDNN conv {state[bool(tf32['cudnn'])]}"


def _mode_line(info: dict) -> str:
    if "mode" in info:
        return ("on" if info["quick"] else "off") + f" ({info['mode']['reason']})"
    if not mode.decided():
        return "chosen by each notebook's setup cell (the auto mode: `course selftest` estimates)"
    return "on" if info["quick"] else "off"


def lesson_in_use() -> str | None:
    """The notebook prefix ("04") of the one lesson package this kernel imported, if one:
    each notebook imports its lesson just before calling setup."""
    import sys

    from .selftest.items import LESSONS

    loaded = [
        prefix
        for prefix, (_, name) in LESSONS.items()
        if f"course_utils.lessons.{name}" in sys.modules
    ]
    return loaded[0] if len(loaded) == 1 else None


def decide_mode(quick: bool | None) -> mode.Decision:
    """Quick or full for this kernel, and why: the parameter, then $COURSE_QUICK, then the
    auto mode (full where this device's estimated full-mode run time of the notebook fits
    its budget)."""
    if quick is not None:
        return mode.Decision(bool(quick), "parameter", f"the parameter quick={quick}")
    from_env = mode.env_quick()
    if from_env is not None:
        value = os.environ.get("COURSE_QUICK")
        return mode.Decision(from_env, "COURSE_QUICK", f"COURSE_QUICK={value}")
    from .device import env_info
    from .selftest.estimate import estimate
    from .selftest.items import LESSONS

    info = env_info()
    prefix = lesson_in_use()
    prefixes = [prefix] if prefix else [p for p in LESSONS if p != "11"]
    worst = max(
        (e for e in (estimate(p, info, quick=False) for p in prefixes) if e),
        key=lambda e: e["estimate_s"] * e["margin"] / e["budget_s"],
    )
    what = f"notebook {prefix}" if prefix else "the slowest notebook"
    fits = worst["fits_with_margin"]
    margin = (
        f"; with the {worst['margin']:g}x margin a CPU keeps, that is"
        if worst["margin"] != 1
        else ","
    )
    return mode.Decision(
        not fits,
        "auto",
        f"auto: full mode of {what} is estimated at {worst['estimate_s']:.0f} s on "
        f"{info['device_class']} ({info['device_name']}){margin} "
        + ("within" if fits else "over")
        + f" its {worst['budget_s']:.0f} s budget",
    )


def _tflops(peak: float | None) -> str:
    return f"{peak / 1e12:.2f} TFLOP/s" if peak else "unknown"


def _peak_label(info: dict, flag: str) -> str:
    """ "peak fp32 matmul", with "(TF32)" where that op kind's float32 work may run on TF32
    tensor cores: the peak the harness then uses (course_utils.device.peak_flops, `op`)."""
    tf32 = info.get("tf32")
    kind = {"matmul": "matmul", "cudnn": "conv"}[flag]
    on = isinstance(tf32, dict) and tf32.get(flag)
    return f"peak fp32 {kind}" + (" (TF32)" if on else "")


def setup(quick: bool | None = None, seed: int = 0, verbose: bool = True) -> dict:
    """Call once at the top of a notebook: `quick` is the papermill parameter (None:
    $COURSE_QUICK decides, and if it is unset, the auto mode; the output says which)."""
    mode.set_quick(quick)
    if verbose and quick is None and mode.env_quick() is None:  # the auto mode probes first
        print("measuring this device's speed to choose quick or full mode ...", flush=True)
    decision = decide_mode(quick)
    mode.set_auto(decision if decision.source == "auto" else None)
    seed_everything(seed)
    if withheld_names():  # the learner edition: a cell needing a reference stops, Run All goes on
        skipping.install()
    return env(verbose)
