"""Whether TorchInductor can generate kernels here: what each missing tool turns into."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from course_utils import inductor


@pytest.fixture
def bare_cuda_box(monkeypatch):
    """A CUDA machine as can_compile sees it (faked): Triton, a 9.0 GPU, gcc, Python.h;
    each test takes one of them away."""
    monkeypatch.setattr(inductor, "cuda_capability", lambda device=None: (9, 0))
    monkeypatch.setattr(inductor.importlib.util, "find_spec", lambda name: object())
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setattr(inductor.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(inductor, "python_headers", lambda: "/usr/include/python3")
    return monkeypatch


CUDA = torch.device("cuda")


def test_can_compile_on_a_complete_cuda_box(bare_cuda_box):
    assert inductor.can_compile(CUDA) == (True, "")


def test_can_compile_on_cuda_needs_a_c_compiler_for_tritons_launcher(bare_cuda_box):
    """Triton compiles a C launcher per kernel on GPUs too: without gcc the compile cell
    must skip, not crash."""
    bare_cuda_box.setattr(inductor.shutil, "which", lambda name: None)
    ok, why = inductor.can_compile(CUDA)
    assert not ok and "C compiler" in why and "$CC" in why


def test_can_compile_on_cuda_honours_cc(bare_cuda_box):
    bare_cuda_box.setenv("CC", "my-cc")
    bare_cuda_box.setattr(
        inductor.shutil, "which", lambda name: "/opt/my-cc" if name == "my-cc" else None
    )
    assert inductor.can_compile(CUDA) == (True, "")


def test_can_compile_on_cuda_needs_python_headers(bare_cuda_box):
    bare_cuda_box.setattr(inductor, "python_headers", lambda: None)
    ok, why = inductor.can_compile(CUDA)
    assert not ok and "Python.h" in why


def test_can_compile_on_cuda_needs_triton_and_a_volta_or_newer_gpu(bare_cuda_box):
    bare_cuda_box.setattr(inductor, "cuda_capability", lambda device=None: (6, 0))
    ok, why = inductor.can_compile(CUDA)
    assert not ok and "7.0" in why and "6.0" in why
    bare_cuda_box.setattr(inductor.importlib.util, "find_spec", lambda name: None)
    ok, why = inductor.can_compile(CUDA)
    assert not ok and "Triton is not installed" in why


def test_python_headers_finds_this_pythons_include_folder_or_says_none():
    found = inductor.python_headers()
    assert found is None or (Path(found) / "Python.h").exists()
