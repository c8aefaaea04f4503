"""course_utils.device: device classes, autocast dtypes and peak FLOP/s, checked without a
GPU by faking what the machine reports (CPU flags, CUDA capability, GPU name)."""

from __future__ import annotations

import pytest
import torch

import course_utils.device as device
from course_utils.device import (
    DEVICE_CLASSES,
    amp_dtype,
    device_class,
    env_info,
    get_device,
    gpu_peak_flops,
    peak_flops,
)

CUDA, MPS, CPU = torch.device("cuda"), torch.device("mps"), torch.device("cpu")


@pytest.fixture
def fake_cpu(monkeypatch):
    """Make the CPU report the given flags."""

    def fake(*flags: str):
        monkeypatch.setattr(device, "cpu_flags", lambda: set(flags))

    return fake


@pytest.fixture
def fake_gpu(monkeypatch):
    """Make 'the' CUDA GPU report a compute capability and a name."""

    def fake(capability: tuple[int, int], name: str = "Fake GPU"):
        monkeypatch.setattr(device, "cuda_capability", lambda d=None: capability)
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda d=None: name)

    return fake


# --- device_class ---------------------------------------------------------------------------------


@pytest.mark.parametrize("flags", [(), ("sse4_2", "avx2", "fma"), ("avx512f", "avx512_vnni")])
def test_cpu_without_native_bf16_is_class_cpu(fake_cpu, flags):
    fake_cpu(*flags)
    assert device_class(CPU) == "cpu"


@pytest.mark.parametrize("flag", ["avx512_bf16", "amx_bf16"])
def test_cpu_with_native_bf16_is_class_cpu_bf16(fake_cpu, flag):
    fake_cpu("avx2", "avx512f", flag)
    assert device_class(CPU) == "cpu-bf16"


@pytest.mark.parametrize("capability", [(6, 0), (6, 1)])
def test_pre_volta_gpu_is_class_cuda(fake_gpu, capability):
    fake_gpu(capability)
    assert device_class(CUDA) == "cuda"


@pytest.mark.parametrize(
    "capability",
    [(7, 0), (7, 5), (8, 0), (8, 6), (8, 9), (9, 0)],
    ids=["V100", "T4", "A100", "A10", "L4", "H100"],
)
def test_volta_and_newer_gpus_are_class_cuda_tensorcore(fake_gpu, capability):
    fake_gpu(capability)
    assert device_class(CUDA) == "cuda-tensorcore"


def test_apple_gpu_is_class_mps():
    assert device_class(MPS) == "mps"


def test_device_class_accepts_a_device_name_string(fake_cpu):
    fake_cpu("amx_bf16")
    assert device_class("cpu") == "cpu-bf16"


def test_device_class_of_this_machine_is_a_known_class():
    assert device_class() in DEVICE_CLASSES


# --- amp_dtype ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("capability", "dtype"),
    [
        ((6, 1), torch.float16),
        ((7, 0), torch.float16),
        ((7, 5), torch.float16),
        ((8, 0), torch.bfloat16),
        ((9, 0), torch.bfloat16),
    ],
    ids=["P100", "V100", "T4", "A100", "H100"],
)
def test_amp_dtype_is_fp16_before_ampere_and_bf16_from_ampere(fake_gpu, capability, dtype):
    """A T4 says bf16 is supported but emulates it: fp16 (with a GradScaler) is the fast one."""
    fake_gpu(capability)
    assert amp_dtype(CUDA) == dtype


def test_amp_dtype_is_bf16_on_cpu_and_fp16_on_mps():
    assert amp_dtype(CPU) == torch.bfloat16
    assert amp_dtype(MPS) == torch.float16


# --- get_device -----------------------------------------------------------------------------------


def test_get_device_honours_course_device(monkeypatch):
    monkeypatch.setenv("COURSE_DEVICE", "cpu")
    assert get_device() == CPU
    monkeypatch.setenv("COURSE_DEVICE", "mps")
    assert get_device() == MPS
    monkeypatch.setenv("COURSE_DEVICE", "cuda:1")
    assert get_device() == torch.device("cuda", 1)


def test_get_device_argument_beats_course_device(monkeypatch):
    monkeypatch.setenv("COURSE_DEVICE", "mps")
    assert get_device("cpu") == CPU


def test_get_device_without_course_device_picks_an_available_device(monkeypatch):
    monkeypatch.delenv("COURSE_DEVICE", raising=False)
    expected = (
        "cuda"
        if torch.cuda.is_available()
        else "mps"
        if torch.backends.mps.is_available()
        else "cpu"
    )
    assert get_device().type == expected


def test_get_device_prefers_cuda_when_it_is_available(monkeypatch):
    monkeypatch.delenv("COURSE_DEVICE", raising=False)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert get_device() == CUDA


# --- peak FLOP/s ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "fp32", "half"),
    [
        ("Tesla T4", 8.1e12, 65e12),
        ("NVIDIA L4", 30.3e12, 121e12),
        ("NVIDIA L40S", 91.6e12, 362e12),
        ("Tesla V100-SXM2-16GB", 15.7e12, 125e12),
        ("NVIDIA A100-SXM4-80GB", 19.5e12, 312e12),
        ("NVIDIA A10G", 31.2e12, 70e12),
        ("NVIDIA A10", 31.2e12, 125e12),
        ("NVIDIA H100 80GB HBM3", 67e12, 989e12),
        ("NVIDIA H200", 67e12, 989e12),
        ("NVIDIA GeForce RTX 4090", 82.6e12, 165e12),
    ],
)
def test_gpu_peak_flops_looks_up_the_data_sheet_figure_by_name(name, fp32, half):
    assert gpu_peak_flops(name) == fp32
    assert gpu_peak_flops(name, torch.float32) == fp32
    assert gpu_peak_flops(name, torch.float16) == half
    assert gpu_peak_flops(name, torch.bfloat16) == half


@pytest.mark.parametrize(
    "name", ["NVIDIA GeForce GTX 1080", "NVIDIA L40", "Radeon Instinct MI300X"]
)
def test_gpu_peak_flops_is_none_for_a_gpu_not_in_the_table(name):
    assert gpu_peak_flops(name) is None


def test_peak_flops_on_cpu_is_a_positive_measured_number():
    peak = peak_flops(CPU)
    assert isinstance(peak, float)
    assert 1e8 < peak < 1e14  # between 0.1 GFLOP/s and 100 TFLOP/s: a measured CPU figure


def test_peak_flops_on_a_known_gpu_is_its_data_sheet_figure(fake_gpu):
    fake_gpu((7, 5), "Tesla T4")
    assert peak_flops(CUDA) == 8.1e12
    assert peak_flops(CUDA, torch.float16) == 65e12


def test_peak_flops_is_unknown_on_mps():
    assert peak_flops(MPS) is None


# --- provenance -----------------------------------------------------------------------------------


def test_env_info_records_device_class_versions_and_capability(fake_gpu):
    fake_gpu((7, 5), "Tesla T4")
    info = env_info(CUDA)
    assert info["device"] == "cuda"
    assert info["device_name"] == "Tesla T4"
    assert info["device_class"] == "cuda-tensorcore"
    assert info["capability"] == "7.5"
    assert info["torch"] == torch.__version__
    assert info["threads"] == torch.get_num_threads()


def test_env_info_on_cpu_has_no_capability(fake_cpu):
    fake_cpu("avx2")
    info = env_info(CPU)
    assert info["device_class"] == "cpu"
    assert "capability" not in info


def test_cpu_flags_are_read_as_a_set_of_strings():
    flags = device.cpu_flags()
    assert isinstance(flags, set)
    assert all(isinstance(f, str) and f for f in flags)


@pytest.mark.parametrize(
    ("name", "fp32"),
    [("NVIDIA H100 PCIe", 51e12), ("NVIDIA H100 NVL", 60e12), ("NVIDIA H200 NVL", 60e12)],
)
def test_h100_and_h200_variants_get_their_own_data_sheet_peaks(name, fp32):
    assert gpu_peak_flops(name) == fp32


def tf32(monkeypatch, *, matmul: bool, cudnn: bool) -> None:
    monkeypatch.setattr(device, "tf32_state", lambda: {"matmul": matmul, "cudnn": cudnn})


@pytest.mark.parametrize(
    ("name", "fp32"), [("NVIDIA A100-SXM4-40GB", 19.5e12), ("NVIDIA H200", 67e12)]
)
def test_fp32_matmul_peak_stays_fp32_when_only_cudnn_tf32_is_on(fake_gpu, monkeypatch, name, fp32):
    """PyTorch's defaults (matmul TF32 off, cuDNN TF32 on): lesson 00's fp32 MLP must be
    measured against the fp32 peak, not the TF32 one (7-8x higher on these GPUs)."""
    fake_gpu((8, 0), name)
    tf32(monkeypatch, matmul=False, cudnn=True)
    assert peak_flops(CUDA) == fp32
    assert peak_flops(CUDA, op="matmul") == fp32


def test_conv_peak_is_the_tf32_peak_while_cudnn_tf32_is_on(fake_gpu, monkeypatch):
    """cuDNN convolutions use TF32 by default on Ampere+: against the plain fp32 peak a conv
    net's "fp32" MFU could pass 100%."""
    fake_gpu((8, 0), "NVIDIA A100-SXM4-40GB")
    tf32(monkeypatch, matmul=False, cudnn=True)
    assert peak_flops(CUDA, op="conv") == 156e12
    tf32(monkeypatch, matmul=False, cudnn=False)
    assert peak_flops(CUDA, op="conv") == 19.5e12


def test_matmul_peak_is_the_tf32_peak_once_matmul_tf32_is_on(fake_gpu, monkeypatch):
    fake_gpu((8, 0), "NVIDIA A100-SXM4-40GB")
    tf32(monkeypatch, matmul=True, cudnn=False)
    assert peak_flops(CUDA) == 156e12
    assert peak_flops(CUDA, op="conv") == 19.5e12


def test_no_tf32_peak_before_ampere(fake_gpu, monkeypatch):
    fake_gpu((7, 5), "Tesla T4")
    tf32(monkeypatch, matmul=True, cudnn=True)
    assert peak_flops(CUDA) == peak_flops(CUDA, op="conv") == 8.1e12


def test_peak_flops_names_the_op_kinds_it_knows():
    with pytest.raises(ValueError, match="matmul"):
        peak_flops(CPU, op="attention")


def test_setup_prints_both_fp32_peaks_where_matmul_and_conv_differ(fake_gpu, monkeypatch, capsys):
    """Default flags on an H200: the fp32 matmul peak (67) and the TF32 conv peak (494)."""
    from course_utils import session

    fake_gpu((9, 0), "NVIDIA H200")
    tf32(monkeypatch, matmul=False, cudnn=True)
    monkeypatch.setenv("COURSE_DEVICE", "cuda")
    info = session.env()
    out = capsys.readouterr().out
    assert info["peak_flops"] == 67e12 and info["peak_flops_conv"] == 494e12
    assert "peak fp32 matmul: 67.00 TFLOP/s" in out
    assert "peak fp32 conv (TF32): 494.00 TFLOP/s" in out


def test_tf32_state_reads_the_backend_flags():
    state = device.tf32_state()
    assert set(state) == {"matmul", "cudnn"} and all(isinstance(v, bool) for v in state.values())


def test_disabled_autocast_is_a_no_op_even_where_torch_would_raise(monkeypatch):
    """torch 2.4 raises for torch.autocast("mps", enabled=False); the harness never calls it."""

    def raising(*args, **kwargs):
        raise RuntimeError("MPS autocast needs torch 2.5")

    monkeypatch.setattr(torch, "autocast", raising)
    with device.autocast(torch.device("mps"), enabled=False):
        pass
