"""Which device we run on, what it can show, and how fast it could be at best."""

from __future__ import annotations

import contextlib
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

# Dense (no sparsity) peak FLOP/s from the vendors' data sheets:
# (fp32 non-tensor, TF32 tensor or None, 16-bit tensor). Matched by whole word, first match
# wins, so variants come before the plain name. Sources: NVIDIA T4, L4, L40S, A10, A100,
# V100, H100 (SXM, PCIe, NVL), H200 (SXM, NVL), RTX 3090/4090 data sheets.
GPU_PEAK_FLOPS = {
    "H200 NVL": (60e12, 417e12, 835e12),
    "H200": (67e12, 494e12, 989e12),
    "H100 PCIe": (51e12, 378e12, 756e12),
    "H100 NVL": (60e12, 417e12, 835e12),
    "H100": (67e12, 494e12, 989e12),  # SXM
    "A100": (19.5e12, 156e12, 312e12),
    "A10G": (31.2e12, 35e12, 70e12),
    "A10": (31.2e12, 62.5e12, 125e12),
    "L4": (30.3e12, 60e12, 121e12),
    "L40S": (91.6e12, 183e12, 362e12),
    "V100": (15.7e12, None, 125e12),
    "T4": (8.1e12, None, 65e12),
    "RTX 4090": (82.6e12, 82.6e12, 165e12),
    "RTX 3090": (35.6e12, 35.6e12, 71e12),
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


# Where the channels_last layout (lesson 05) pays for the course's conv nets, by device class:
# (in fp32, under autocast, evidence). Read by lesson 05's check (whether its fp32 speed part
# is graded) and by the capstone's tuned recipe (whether it converts, under its autocast), so
# the two notebooks cannot disagree.
CHANNELS_LAST = {
    "cuda-tensorcore": (
        True,
        True,
        "NVIDIA's convolution guide: tensor-core kernels (AMP) read NHWC, NCHW costs "
        "transposes; not yet measured by the course on a GPU",
    ),
    "cuda": (False, False, "no tensor cores: NHWC buys nothing there (NVIDIA); not measured"),
    "cpu-bf16": (
        True,
        False,
        "oneDNN, one thread, NCHW / channels_last training step, interleaved medians: lesson "
        "05's SENet width 16, batch 32, fp32: 1.18-1.40x (n=16, 2 shared cores); the capstone's "
        "SmallCNN(16), batch 32: fp32 1.27-1.43x, bf16 autocast 1.33-1.44x (n=3 x 20 pairs, "
        "2-core EPYC). Under bf16 autocast it costs accuracy: the capstone's 4-epoch tuned run "
        "reached 79.4/81.4/84.5% held-out in channels_last, 90.7/89.6/92.8% in NCHW (seeds 0-2)",
    ),
    "cpu": (False, False, "no native bf16; oneDNN's fp32 kernels may gain too: not measured"),
    "mps": (False, False, "not measured on Apple GPUs"),
}


def channels_last_pays(device: torch.device | str | None = None, autocast: bool = False) -> bool:
    """Whether channels_last is known to pay for the course's conv nets on this device's class
    (`autocast`: in a run under autocast), measured or, on tensor-core GPUs, documented by the
    vendor: see CHANNELS_LAST. `device` may also be a device class's name."""
    cls = device if device in CHANNELS_LAST else device_class(device)
    fp32, with_autocast, _ = CHANNELS_LAST[cls]
    return with_autocast if autocast else fp32


def gpu_peak_flops(
    name: str, dtype: torch.dtype = torch.float32, tf32: bool = False
) -> float | None:
    """Data-sheet dense peak for a GPU name, or None when the GPU is not in our table.
    For float32 with `tf32`, the TF32 tensor-core peak where the GPU has one."""
    key = match_gpu(name, GPU_PEAK_FLOPS)
    if key is None:
        return None
    fp32, tf32_peak, half = GPU_PEAK_FLOPS[key]
    if dtype != torch.float32:
        return half
    return tf32_peak if tf32 and tf32_peak else fp32


def match_gpu(name: str, keys) -> str | None:
    """The first of `keys` (GPU names, variants before the plain name) that `name` contains as
    whole words: "L4" must not match "L40S", nor "A10" match "A100"."""
    for key in keys:
        if re.search(rf"(?<![A-Za-z0-9]){re.escape(key)}(?![A-Za-z0-9])", name, re.IGNORECASE):
            return key
    return None


def tf32_state() -> dict[str, bool]:
    """Whether float32 matmuls and cuDNN convolutions may run in TF32 (Ampere and newer).

    PyTorch leaves matmul TF32 off and cuDNN conv TF32 on by default
    (https://pytorch.org/docs/stable/notes/cuda.html#tensorfloat-32-tf32-on-ampere-and-later-devices).
    Newer torch has `fp32_precision` ("tf32" / "ieee"); older torch only `allow_tf32`.
    """
    matmul, conv = torch.backends.cuda.matmul, torch.backends.cudnn

    def on(backend, legacy) -> bool:
        precision = getattr(backend, "fp32_precision", None)
        if isinstance(precision, str) and precision not in ("none", ""):
            return precision == "tf32"
        return bool(legacy())

    return {
        "matmul": on(matmul, lambda: matmul.allow_tf32),
        "cudnn": on(conv, lambda: conv.allow_tf32),
    }


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


PEAK_OPS = ("matmul", "conv")  # the op kinds whose float32 TF32 switch is separate


def peak_flops(
    device: torch.device | str | None = None,
    dtype: torch.dtype = torch.float32,
    op: str = "matmul",
) -> float | None:
    """Peak dense FLOP/s: the data sheet for known GPUs, a short matmul probe on a CPU.

    For float32 on Ampere and newer, `op` picks the TF32 switch that applies: matmuls
    (`torch.backends.cuda.matmul`, off by default) or cuDNN convolutions
    (`torch.backends.cudnn`, on by default). A plain fp32 MLP is measured against the fp32
    peak unless matmul TF32 is on, a conv net against the TF32 peak unless cuDNN's is off;
    one flag for both read an MLP's MFU 7-8x too low on an A100 or H100.
    """
    if op not in PEAK_OPS:
        raise ValueError(f"op must be one of {PEAK_OPS}, got {op!r}")
    device = torch.device(device) if device is not None else get_device()
    if device.type == "cuda":
        tf32 = cuda_capability(device)[0] >= 8 and tf32_state()[_TF32_FLAG[op]]
        return gpu_peak_flops(torch.cuda.get_device_name(device), dtype, tf32)
    if device.type == "cpu":
        return _probe_cpu_flops(dtype)
    return None


_TF32_FLAG = {"matmul": "matmul", "conv": "cudnn"}  # op kind -> its key in tf32_state()


def device_name(device: torch.device | str | None = None) -> str:
    device = torch.device(device) if device is not None else get_device()
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    if device.type == "mps":
        return "Apple GPU (MPS)"
    return _cpu_model() or platform.processor() or platform.machine() or "CPU"


def _cpu_model() -> str:
    """The CPU's model name (Linux /proc/cpuinfo); empty where it cannot be read."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


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
        info["tf32"] = tf32_state() if cuda_capability(device)[0] >= 8 else "not supported"
    return info


def autocast(device: torch.device | str | None = None, enabled: bool = True, dtype=None):
    """`torch.autocast` for this device with its fast dtype; a no-op context when disabled.

    A no-op rather than `torch.autocast(..., enabled=False)`: torch 2.4 raises for "mps" even
    when disabled (MPS autocast arrived in 2.5).
    """
    device = torch.device(device) if device is not None else get_device()
    if not enabled:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=dtype or amp_dtype(device))


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


# Near the memory limit not every allocation failure is a torch.cuda.OutOfMemoryError: cuBLAS
# and cuDNN report theirs as a plain RuntimeError (a failed workspace or handle allocation).
_OOM_MESSAGES = ("out of memory", "CUBLAS_STATUS_ALLOC_FAILED", "CUDNN_STATUS_ALLOC_FAILED")


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether `exc` says the device ran out of memory (and nothing else is wrong).

    torch.cuda.OutOfMemoryError (a RuntimeError subclass), or a RuntimeError whose message is
    an allocation failure: "CUDA out of memory", "MPS backend out of memory",
    "CUBLAS_STATUS_ALLOC_FAILED", or cuDNN's "CUDNN_STATUS_NOT_SUPPORTED" when it names memory.
    """
    if isinstance(exc, torch.cuda.OutOfMemoryError):
        return True
    if not isinstance(exc, RuntimeError):
        return False
    text = str(exc)
    if any(m.lower() in text.lower() for m in _OOM_MESSAGES):
        return True
    return "CUDNN_STATUS_NOT_SUPPORTED" in text and "memory" in text.lower()


def release_cached_memory(device: torch.device | str | None = None) -> None:
    """After an out-of-memory failure: collect the failed try's garbage and hand the caching
    allocator's free blocks on `device` back, so the next try starts clean."""
    import gc

    gc.collect()
    device = torch.device(device) if device is not None else get_device()
    if device.type == "cuda":
        with torch.cuda.device(device):  # the course's device, which need not be the current one
            torch.cuda.empty_cache()
    elif device.type == "mps":
        torch.mps.empty_cache()
