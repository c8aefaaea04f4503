"""The meta stand-in for a GPU (lesson 03's probes.DeviceFaults): code that raises there fails
when the probe saw a fault a GPU refuses as well (a read back to the host, tensors on two
devices in one operation), and is the stand-in's limit otherwise (an op meta lacks). Checked
directly and through check 03-transfer; check 03-normalise's cases are in
tests/test_lesson_03_normalise.py. Every test runs in well under a second."""

from __future__ import annotations

import pytest
import torch
from check_helpers import failure

from course_utils.lessons import data_loading as lesson
from course_utils.lessons.data_loading.probes import DeviceFaults, stand_in_fault

META = torch.device("meta")


def _raised(fn) -> tuple[BaseException, DeviceFaults]:
    faults = DeviceFaults()
    with pytest.raises(Exception) as info, faults:
        fn()
    return info.value, faults


def test_a_cpu_tensor_in_an_operation_on_the_device_is_a_fault_a_0d_one_is_not():
    x = torch.zeros(2, 3, 4, 4, device=META)
    with DeviceFaults() as faults:
        x - torch.tensor(0.5)  # a 0-d CPU tensor is a scalar, on a GPU too
    assert faults.mixed == []
    exc, faults = _raised(lambda: x - torch.zeros(1, 3, 1, 1))
    assert "two devices" in stand_in_fault(exc, faults, "meta")
    assert "sub: meta (2, 3, 4, 4), cpu (1, 3, 1, 1)" in faults.mixed[0]


@pytest.mark.parametrize(
    "read, call",
    [
        (lambda x: x.numpy(), ".numpy()"),
        (lambda x: x.cpu(), ".cpu()"),
        (lambda x: x.to("cpu"), ".to()"),
        (lambda x: x.sum().item(), ".item()"),
        (lambda x: bool(x.sum()), "__bool__"),
    ],
    ids=["numpy", "cpu", "to-cpu", "item", "bool"],
)
def test_a_read_back_to_the_host_is_a_fault(read, call):
    x = torch.zeros(2, 3, device=META)
    exc, faults = _raised(lambda: read(x))
    assert call in stand_in_fault(exc, faults, "meta")


def test_an_op_meta_lacks_is_no_fault():
    x = torch.zeros(2, 3, device=META)
    exc, faults = _raised(lambda: x[x > 0])  # boolean-mask reads need nonzero()
    assert isinstance(exc, NotImplementedError) and stand_in_fault(exc, faults, "meta") is None


def test_host_reads_of_cpu_tensors_are_not_recorded():
    with DeviceFaults() as faults:
        torch.zeros(3).numpy(), torch.zeros(3).cpu(), torch.zeros(()).item()
    assert faults.host_reads == [] and faults.mixed == []


# --- check 03-transfer ---------------------------------------------------------------------


def _stats(device, mean, std):
    return (
        torch.tensor(mean, device=device).view(1, -1, 1, 1),
        torch.tensor(std, device=device).view(1, -1, 1, 1),
    )


def constants_on_host(batch, device, mean, std):
    """Mean and std made on the CPU: right on a CPU, refused by a GPU."""
    images, labels = (t.to(device, non_blocking=True) for t in batch)
    m, s = _stats("cpu", mean, std)
    return (images.float() / 255 - m) / s, labels


def constants_on_host_for_cuda(batch, device, mean, std):
    """'No small copies to the GPU': the constants stay on the host when the device is cuda."""
    images, labels = (t.to(device, non_blocking=True) for t in batch)
    m, s = _stats("cpu" if device.type == "cuda" else images.device, mean, std)
    return (images.float() / 255 - m) / s, labels


def masked_labels(batch, device, mean, std):
    """Valid, with a boolean-mask read (nonzero) the meta stand-in lacks."""
    images, labels = (t.to(device, non_blocking=True) for t in batch)
    labels = labels[labels >= 0]
    m, s = _stats(images.device, mean, std)
    return (images.float() / 255 - m) / s, labels


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU the first run raises already")
def test_transfer_fails_constants_left_on_the_host_naming_the_two_devices():
    exc = failure(lesson.check_transfer, constants_on_host)
    assert exc.status == "failed" and "tensors on two devices" in exc.summary


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU runs the cuda path itself")
def test_transfer_fails_constants_kept_on_the_host_only_for_cuda():
    exc = failure(lesson.check_transfer, constants_on_host_for_cuda)
    assert "asked for cuda: one operation got tensors on two devices" in exc.summary


def test_transfer_calls_an_op_meta_lacks_its_own_limit_and_passes():
    result = lesson.check_transfer(masked_labels)
    limits = [p for p in result.parts if p.status == "not-applicable"]
    assert result.status == "passed" and limits
    assert all("not your code's fault" in p.message for p in limits)
