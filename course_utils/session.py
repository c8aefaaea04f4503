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
    peak = peak_flops(device)
    info["peak_flops"] = peak
    info["dataset"] = dataset_source()
    info["quick"] = mode.is_quick()
    if verbose:
        rows = [
            ("device", f"{info['device']} ({info['device_name']})"),
            ("device class", info["device_class"]),
            ("torch / CUDA", f"{info['torch']} / {info['cuda'] or 'none'}"),
            ("threads", f"{info['threads']} of {info['cpu_count']} CPUs"),
            (_peak_label(info), f"{peak / 1e12:.2f} TFLOP/s" if peak else "unknown"),
            ("data", info["dataset"]),
            ("quick mode", "on" if info["quick"] else "off"),
        ]
        print("\n".join(f"{k:>13}: {v}" for k, v in rows))
    return info


def _peak_label(info: dict) -> str:
    """ "peak fp32", or "peak fp32 (TF32)" where float32 work may run on TF32 tensor cores,
    which is the peak the harness then uses (course_utils.device.peak_flops)."""
    tf32 = info.get("tf32")
    return "peak fp32 (TF32)" if isinstance(tf32, dict) and any(tf32.values()) else "peak fp32"


def setup(quick: bool | None = None, seed: int = 0, verbose: bool = True) -> dict:
    """Call once at the top of a notebook: `quick` is the papermill parameter (None follows
    $COURSE_QUICK)."""
    mode.set_quick(quick)
    seed_everything(seed)
    return env(verbose)
