"""Which device we run on, what it can show, and how fast it could be at best."""

from __future__ import annotations

import functools
import os
import platform
import queue
import re
import sys
import threading
import time

import torch

DEVICE_CLASSES = ("cuda-tensorcore", "cuda", "cpu-bf16", "cpu", "mps")

# Dense (no sparsity) peak FLOP/s from the vendors' data sheets: (fp32 non-tensor, 16-bit tensor).
# TF32 is not counted as fp32. Sources: NVIDIA T4/L4/V100/A100/H100/H200 data sheets.
GPU_PEAK_FLOPS = {
    "H200": (67e12, 989e12),
    "H100": (67e12, 989e12),  # SXM; PCIe is lower (51e12, 756e12)
    "A100": (19.5e12, 312e12),
    "A10G": (31.2e12, 70e12),
    "A10": (31.2e12, 125e12),
    "L4": (30.3e12, 121e12),
    "L40S": (91.6e12, 362e12),
    "V100": (15.7e12, 125e12),
    "T4": (8.1e12, 65e12),
    "RTX 4090": (82.6e12, 165e12),
    "RTX 3090": (35.6e12, 71e12),
}


def get_device(name: str | None = None) -> torch.device:
    """The device to use: `name`, else $COURSE_DEVICE, else cuda > mps > cpu."""
    name = name or os.environ.get("COURSE_DEVICE")
    if name:
        return torch.device(name)
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def synchronize(device: torch.device | str | None = None) -> None:
    """Wait for queued kernels: CUDA and MPS run asynchronously, so a timer must sync."""
    device = torch.device(device) if device is not None else get_device()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def cpu_flags() -> set[str]:
    """The CPU's feature flags (Linux /proc/cpuinfo); empty where they cannot be read."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cuda_capability(device: torch.device | None = None) -> tuple[int, int]:
    return torch.cuda.get_device_capability(device)


def device_class(device: torch.device | str | None = None) -> str:
    """One of DEVICE_CLASSES: what speed effects this device can be expected to show.

    `cpu-bf16` needs native bf16 (avx512_bf16 or AMX); without it bf16 autocast is emulated
    and slower. A T4 reports bf16 support but emulates it, yet its fp16 tensor cores count.
    """
    device = torch.device(device) if device is not None else get_device()
    if device.type == "cuda":
        return "cuda-tensorcore" if cuda_capability(device)[0] >= 7 else "cuda"
    if device.type == "mps":
        return "mps"
    flags = cpu_flags()
    return "cpu-bf16" if {"avx512_bf16", "amx_bf16"} & flags else "cpu"


def amp_dtype(device: torch.device | str | None = None) -> torch.dtype:
    """The autocast dtype that is fast here: bf16 on Ampere+ and bf16 CPUs, fp16 otherwise."""
    device = torch.device(device) if device is not None else get_device()
    if device.type == "cuda":
        return torch.bfloat16 if cuda_capability(device)[0] >= 8 else torch.float16
    if device.type == "mps":
        return torch.float16
    return torch.bfloat16


def gpu_peak_flops(name: str, dtype: torch.dtype = torch.float32) -> float | None:
    """Data-sheet dense peak for a GPU name, or None when the GPU is not in our table."""
    for key, (fp32, half) in GPU_PEAK_FLOPS.items():
        # whole words only: "L4" must not match "L40S", nor "A10" match "A100"
        if re.search(rf"(?<![A-Za-z0-9]){re.escape(key)}(?![A-Za-z0-9])", name, re.IGNORECASE):
            return fp32 if dtype == torch.float32 else half
    return None


@functools.cache
def _probe_cpu_flops(dtype: torch.dtype) -> float:
    """Measured matmul FLOP/s on this CPU: the best a real kernel reaches, as a practical peak.

    The best of many ~10 ms samples, so that a busy moment on a shared machine does not
    lower the figure (a peak is a best case, and load only ever slows a sample down).
    """
    n = 1024
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    for _ in range(2):
        a @ b
    best = float("inf")
    for _ in range(15):
        t0 = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best


def peak_flops(
    device: torch.device | str | None = None, dtype: torch.dtype = torch.float32
) -> float | None:
    """Peak dense FLOP/s: the data sheet for known GPUs, a short matmul probe on a CPU."""
    device = torch.device(device) if device is not None else get_device()
    if device.type == "cuda":
        return gpu_peak_flops(torch.cuda.get_device_name(device), dtype)
    if device.type == "cpu":
        return _probe_cpu_flops(dtype)
    return None


def device_name(device: torch.device | str | None = None) -> str:
    device = torch.device(device) if device is not None else get_device()
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    if device.type == "mps":
        return "Apple GPU (MPS)"
    return platform.processor() or platform.machine() or "CPU"


def env_info(device: torch.device | str | None = None) -> dict:
    """Everything a measurement's provenance needs: device, class, versions, threads."""
    device = torch.device(device) if device is not None else get_device()
    info = {
        "device": str(device),
        "device_name": device_name(device),
        "device_class": device_class(device),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": sys.version.split()[0],
        "threads": torch.get_num_threads(),
        "cpu_count": os.cpu_count(),
    }
    if device.type == "cuda":
        info["capability"] = "{}.{}".format(*cuda_capability(device))
    return info


class SimulatedAccelerator:
    """A toy asynchronous device for machines whose kernels all run synchronously (CPUs).

    `launch(seconds)` queues that much work on a background thread and returns at once, as a
    CUDA kernel launch does; `synchronize()` waits until the queue is empty, as
    torch.cuda.synchronize() does. It makes a missing synchronisation visible on a laptop.
    """

    def __init__(self):
        self._queue: queue.Queue[float | None] = queue.Queue()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (seconds := self._queue.get()) is not None:
            time.sleep(seconds)
            self._queue.task_done()
        self._queue.task_done()

    def launch(self, seconds: float) -> None:
        self._queue.put(seconds)

    def synchronize(self) -> None:
        self._queue.join()

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join()
