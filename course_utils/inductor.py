"""Whether TorchInductor can generate kernels on this machine, and why not.

`torch.compile`'s default backend writes C++/OpenMP for CPUs and Triton for GPUs; where the
tools it calls are missing the first compiled call crashes deep in a build step. Lessons 05
and 12 ask here first, so a compile cell skips with the reason instead
(https://docs.pytorch.org/docs/stable/torch.compiler.html).
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sysconfig

import torch

from .device import cuda_capability, get_device


def cxx_compiler() -> str | None:
    """The C++ compiler inductor needs on a CPU (path), or None: then a CPU cannot compile."""
    for name in ("g++", "c++", "clang++", "cl"):
        if path := shutil.which(name):
            return path
    return None


def c_compiler() -> str | None:
    """The C compiler Triton builds each kernel's launcher with ($CC, else gcc or clang on
    PATH, as triton.runtime.build looks for them), or None."""
    if cc := os.environ.get("CC"):
        return shutil.which(cc)
    return shutil.which("gcc") or shutil.which("clang") or shutil.which("cc")


def python_headers() -> str | None:
    """The folder holding Python.h (Triton's launcher includes it), or None: a bare Python
    without its -dev package."""
    include = sysconfig.get_paths().get("include") or ""
    return include if os.path.exists(os.path.join(include, "Python.h")) else None


def can_compile(device: torch.device | None = None) -> tuple[bool, str]:
    """(whether inductor can generate kernels here, why not). On CUDA inductor writes Triton
    kernels, and Triton compiles a small C launcher per kernel: it needs Triton itself, a
    GPU of compute capability 7.0 or newer, a C compiler and Python.h, or the first compiled
    call crashes instead of the cell skipping."""
    device = torch.device(device) if device is not None else get_device()
    if device.type == "cpu" and cxx_compiler() is None:
        return False, "no C++ compiler on PATH (inductor writes C++ for CPUs): install g++"
    if device.type == "mps":
        return False, "inductor's MPS backend is experimental: this demo skips it"
    if device.type == "cuda":
        return _can_compile_cuda(device)
    return True, ""


def _can_compile_cuda(device: torch.device) -> tuple[bool, str]:
    if importlib.util.find_spec("triton") is None:
        return False, "Triton is not installed (inductor writes Triton kernels for GPUs)"
    major, minor = cuda_capability(device)
    if major < 7:
        return False, f"Triton needs compute capability 7.0 or newer; this GPU is {major}.{minor}"
    if c_compiler() is None:
        return False, (
            "no C compiler (Triton compiles a C launcher for every kernel): install gcc "
            "(apt-get install build-essential) or set $CC"
        )
    if python_headers() is None:
        return False, (
            "no Python.h (Triton's kernel launcher includes it): install the python3-dev "
            "package for this Python"
        )
    return True, ""
