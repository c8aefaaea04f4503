"""TF32: float32 matmuls on tensor cores (Ampere and newer GPUs), read and measured with
whichever API the installed torch has. The two APIs must not be mixed: once the new one is
used, the old getter raises."""

from __future__ import annotations

import torch

from ...measure import compare


def tf32_settings() -> dict[str, str]:
    """How float32 matmuls and convolutions may run on CUDA here: the current API
    (`fp32_precision`, torch >= 2.9) where the installed torch has it, else the older one."""
    matmul = getattr(torch.backends.cuda.matmul, "fp32_precision", None)
    if matmul is not None:
        return {
            "torch.backends.cuda.matmul.fp32_precision": matmul,
            "torch.backends.cudnn.conv.fp32_precision": torch.backends.cudnn.conv.fp32_precision,
            "torch.backends.fp32_precision (global default)": torch.backends.fp32_precision,
        }
    return {
        "torch.get_float32_matmul_precision()": torch.get_float32_matmul_precision(),
        "torch.backends.cudnn.allow_tf32": str(torch.backends.cudnn.allow_tf32),
    }


def _set_tf32(on: bool) -> None:
    if hasattr(torch.backends.cuda.matmul, "fp32_precision"):  # torch >= 2.9
        torch.backends.cuda.matmul.fp32_precision = "tf32" if on else "ieee"
    else:
        torch.set_float32_matmul_precision("high" if on else "highest")


def tf32_comparison(device: torch.device, n: int = 4096):
    """float32 matmul with TF32 allowed vs IEEE float32, on Ampere or newer (capability >= 8);
    None elsewhere: T4s and V100s have no TF32, CPUs ignore the setting. Settings restored."""
    if device.type != "cuda" or torch.cuda.get_device_capability(device)[0] < 8:
        return None
    new_api = hasattr(torch.backends.cuda.matmul, "fp32_precision")
    before = (
        torch.backends.cuda.matmul.fp32_precision
        if new_api
        else torch.get_float32_matmul_precision()
    )
    a, b = torch.randn(n, n, device=device), torch.randn(n, n, device=device)

    def run(on: bool):
        return lambda: (_set_tf32(on), a @ b)

    try:
        return compare(
            run(False),
            run(True),
            repeats=10,
            device=device,
            labels=("float32 (ieee)", "float32 with TF32"),
        )
    finally:
        if new_api:
            torch.backends.cuda.matmul.fp32_precision = before
        else:
            torch.set_float32_matmul_precision(before)
