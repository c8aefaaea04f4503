"""What every process of lesson 06 imports: the problem, its configuration, and a trace.

The learner's torchrun script builds its model, data and optimizer here, so the check can
replay the same training in one process. Worker processes import this module by name, which
is why it lives in course_utils and not in the notebook (see the lesson on pickling).

When $COURSE_DDP_TRACE names a folder (the check sets it), each process records what it did
there, one JSON line per event: which samples each training forward saw, every `torch.save`,
an uncaught exception, and whether the process group was still up when Python exited. When
$COURSE_DDP_FAIL is set too, every training forward raises `InjectedFailure`: the check's
way of making training fail, to see whether the script still shuts its process group down.
The check reads behaviour from this trace, never from what the script prints.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

TRACE_ENV = "COURSE_DDP_TRACE"  # folder for the per-process trace files
FAIL_ENV = "COURSE_DDP_FAIL"  # set: every training forward raises InjectedFailure
N_SAMPLES, N_FEATURES, N_CLASSES, HIDDEN = 128, 16, 4, 32


@dataclass
class Config:
    """Hyper-parameters of a run; `batch_size` is the GLOBAL batch, over all processes."""

    epochs: int = 2
    batch_size: int = 32
    lr: float = 0.1
    seed: int = 0
    checkpoint: Path = Path("checkpoint.pt")


def parse_args(argv: list[str] | None = None) -> Config:
    p = argparse.ArgumentParser(description="lesson 06 data-parallel training")
    p.add_argument("--epochs", type=int, default=Config.epochs)
    p.add_argument("--batch-size", type=int, default=Config.batch_size, help="global batch")
    p.add_argument("--lr", type=float, default=Config.lr)
    p.add_argument("--seed", type=int, default=Config.seed)
    p.add_argument("--checkpoint", type=Path, default=Config.checkpoint)
    a = p.parse_args(argv)
    return Config(a.epochs, a.batch_size, a.lr, a.seed, a.checkpoint)


def make_dataset(n: int = N_SAMPLES) -> torch.utils.data.TensorDataset:
    """A small learnable classification set; every sample has a distinct first feature, so a
    batch's samples can be identified by value (the trace relies on it)."""
    g = torch.Generator().manual_seed(1234)
    x = torch.randn(n, N_FEATURES, generator=g)
    x[:, 0] = torch.randperm(n, generator=g).float() / n - 0.5  # distinct values
    y = (x @ torch.randn(N_FEATURES, N_CLASSES, generator=g)).argmax(1)
    return torch.utils.data.TensorDataset(x, y)


def make_model(hidden: int = HIDDEN) -> nn.Module:
    """The same initial weights in every process and every replay (seeded locally)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = nn.Sequential(
            nn.Linear(N_FEATURES, hidden), nn.Tanh(), nn.Linear(hidden, N_CLASSES)
        )
    if os.environ.get(TRACE_ENV):
        model.register_forward_pre_hook(_trace_forward)
    return model


def make_optimizer(params, lr: float) -> torch.optim.Optimizer:
    """SGD with momentum: its update is linear in the gradient, so a wrong gradient scale
    shows up in the parameters (and the check can name it)."""
    return torch.optim.SGD(params, lr=lr, momentum=0.9)


class InjectedFailure(RuntimeError):
    """Raised by a training forward when the check makes training fail on purpose."""


def launch_backend(world: int) -> str:
    """The backend a launch of `world` processes uses on this machine: NCCL with one GPU per
    process when there are enough GPUs, otherwise gloo on the CPU (a laptop, or Colab's
    single GPU: the lesson still runs two processes). $COURSE_DEVICE naming a device other
    than a GPU (`cpu`) asks for the CPU, so gloo, whatever GPUs there are."""
    requested = os.environ.get("COURSE_DEVICE")
    if requested and torch.device(requested).type != "cuda":
        return "gloo"
    return "nccl" if torch.cuda.is_available() and torch.cuda.device_count() >= world else "gloo"


def describe_launch(world: int, backend: str | None = None) -> str:
    """Processes, backend and devices in words, for check messages and the scaling table:
    "2 CPU processes (gloo, one thread each)" or "2 processes (NCCL, one GPU each)"."""
    backend = backend or launch_backend(world)
    if backend == "nccl":
        return f"{world} processes (NCCL, one GPU each)"
    return f"{world} CPU processes ({backend}, one thread each)"


def backend_and_device(local_rank: int) -> tuple[str, torch.device]:
    """This rank's backend (`launch_backend`) and device: its own GPU under NCCL, the CPU
    under gloo. The course's own torchrun entry points (probe.py, bench.py) use it; the
    notebook's script writes these lines itself, since on GPUs they are the ones to know."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if launch_backend(world) == "nccl":
        torch.cuda.set_device(local_rank)
        return "nccl", torch.device("cuda", local_rank)
    return "gloo", torch.device("cpu")


def device_ids(device: torch.device) -> list[int] | None:
    """What DDP's `device_ids` wants: [index] for one GPU per process, None on the CPU."""
    return [device.index] if device.type == "cuda" else None


# --- the trace the checks read ---------------------------------------------------------


def _rank() -> int:
    return int(os.environ.get("RANK", "0"))


def record(event: str, **fields) -> None:
    """Append one event to this process's trace file (a no-op outside a traced run)."""
    folder = os.environ.get(TRACE_ENV)
    if not folder:
        return
    line = json.dumps(
        {"event": event, "rank": _rank(), "pid": os.getpid(), "t": time.time(), **fields}
    )
    with open(Path(folder) / f"rank{_rank()}-{os.getpid()}.jsonl", "a") as f:
        f.write(line + "\n")


_LOOKUP: dict[float, int] = {}


def _trace_forward(module: nn.Module, inputs: tuple) -> None:
    """Which samples a training forward saw, identified by their distinct first feature."""
    if not (module.training and torch.is_grad_enabled()) or not inputs:
        return
    if not _LOOKUP:
        x = make_dataset().tensors[0]
        _LOOKUP.update({v: i for i, v in enumerate(x[:, 0].tolist())})
    first = inputs[0].detach()[:, 0].float().cpu().tolist()
    if os.environ.get(FAIL_ENV):
        record("injected")
        raise InjectedFailure(
            "the check made this training forward fail on purpose, to see the process group "
            "shut down"
        )
    record("forward", samples=[_LOOKUP.get(v, -1) for v in first])


def _record_exit() -> None:
    """Python is shutting down: say whether this process left its process group up."""
    import torch.distributed as dist

    record("exit", process_group=dist.is_available() and dist.is_initialized())


def _install_trace() -> None:
    """Record every torch.save and an uncaught exception, in this process only."""
    save = torch.save

    def traced_save(obj, f, *args, **kwargs):
        record("save", path=str(f))
        return save(obj, f, *args, **kwargs)

    torch.save = traced_save
    hook = sys.excepthook

    def traced_excepthook(kind, value, tb):
        record("exception", type=kind.__name__, message=str(value).strip()[:500])
        hook(kind, value, tb)

    sys.excepthook = traced_excepthook
    # Python shut down normally (atexit runs after the script's last line, before the C++
    # runtime tears down): a crash after this is gloo's teardown, not the learner's code
    atexit.register(_record_exit)


if os.environ.get(TRACE_ENV) and not getattr(torch.save, "_course_traced", False):
    _install_trace()
    torch.save._course_traced = True
