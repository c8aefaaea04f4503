"""What every notebook calls first: set the mode, seed, and say where we are running."""

from __future__ import annotations

import random

import numpy as np
import torch

from . import mode
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
    if verbose:
        rows = [
            ("device", f"{info['device']} ({info['device_name']})"),
            ("device class", info["device_class"]),
            ("torch / CUDA", f"{info['torch']} / {info['cuda'] or 'none'}"),
            ("threads", f"{info['threads']} of {info['cpu_count']} CPUs"),
            (_peak_label(info, "matmul"), _tflops(peak)),
            *([(_peak_label(info, "cudnn"), _tflops(conv_peak))] if conv_peak != peak else []),
            ("data", info["dataset"]),
            ("quick mode", "on" if info["quick"] else "off"),
        ]
        width = max(len(k) for k, _ in rows)
        print("\n".join(f"{k:>{width}}: {v}" for k, v in rows))
    return info


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
    """Call once at the top of a notebook: `quick` is the papermill parameter (None follows
    $COURSE_QUICK)."""
    mode.set_quick(quick)
    seed_everything(seed)
    return env(verbose)
