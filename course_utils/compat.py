"""Whether torchvision loads beside the installed torch, and if not, the one command that fixes it.

torchvision's compiled operators are built against one torch release: with another, `import
torchvision` dies with `RuntimeError: operator torchvision::nms does not exist` (or an undefined
symbol), which says nothing about what to install. The pairs are documented by torchvision
(https://github.com/pytorch/vision#installation): torch 2.N goes with torchvision 0.(N+15),
e.g. torch 2.14 with torchvision 0.29 (the pair this course is tested with).
"""

from __future__ import annotations

import importlib
import re
from importlib import metadata

from .errors import TorchvisionMismatch

WHEELS = (
    "https://download.pytorch.org/whl"  # PyTorch's own index: one folder per build (cpu, cu130)
)
PAIRS = "https://github.com/pytorch/vision#installation"


# The oldest torch every lesson runs on, and why (pyproject.toml's floor; a test keeps them in
# step). Colab brings its own torch, newer than these.
TORCH_FLOOR = "2.6"
NEEDS = {
    "2.6": "lesson 13 imports fully_shard from torch.distributed.fsdp (public from 2.6: "
    "https://docs.pytorch.org/docs/2.6/distributed.fsdp.fully_shard.html)",
    "2.5": "lesson 12 uses FlexAttention (torch.nn.attention.flex_attention, new in 2.5)",
    "2.4": "lessons 06 and 13 launch with torch.distributed.run; lesson 16 uses "
    "torch.distributed.pipelining (new in 2.4)",
}


def _release(version: str) -> tuple[int, int]:
    major, minor = re.match(r"(\d+)\.(\d+)", version).groups()
    return int(major), int(minor)


def below_floor(torch_version: str) -> list[str]:
    """What does not run on `torch_version`: the NEEDS of every newer release, newest first."""
    have = _release(torch_version)
    return [why for need, why in NEEDS.items() if have < _release(need)]


def torchvision_for(torch_version: str) -> str | None:
    """The torchvision release series built for `torch_version` ("2.14.1+cu130" -> "0.29.*"),
    or None where the rule is not known (torch 1.x, or a major release after 2)."""
    match = re.match(r"(\d+)\.(\d+)", torch_version)
    if not match or match[1] != "2":
        return None
    return f"0.{int(match[2]) + 15}.*"


def fix_command(torch_version: str, torchvision_version: str | None) -> str:
    """The pip command that installs the torchvision built for this torch: from PyTorch's index
    where torch came from there (a "+cpu" or "+cu130" build), reinstalled where the release
    already matches (then the build, CPU or CUDA, is what differs)."""
    wanted = torchvision_for(torch_version)
    if wanted is None:
        return f"pip install the torchvision release listed for torch {torch_version} at {PAIRS}"
    build = torch_version.partition("+")[2]
    index = f" --index-url {WHEELS}/{build}" if build else ""
    same = torchvision_version and torchvision_version.startswith(wanted.rstrip("*"))
    again = " --force-reinstall --no-deps" if same else ""
    return f'pip install{again} "torchvision=={wanted}"{index}'


def _installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _import_torchvision():
    return importlib.import_module("torchvision")


def require_torchvision():
    """Import torchvision, or raise TorchvisionMismatch: one line with the fix, not the raw error
    (a missing torchvision stays a ModuleNotFoundError)."""
    try:
        return _import_torchvision()
    except ModuleNotFoundError:
        raise  # not installed at all: pip's own words say what is missing
    except (RuntimeError, ImportError, OSError, AttributeError) as exc:
        import torch

        vision = _installed("torchvision")
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise TorchvisionMismatch(
            f"torchvision {vision or '(unknown version)'} does not load with torch "
            f"{torch.__version__} ({first}): install the torchvision built for this torch: "
            + fix_command(torch.__version__, vision)
        ) from exc
