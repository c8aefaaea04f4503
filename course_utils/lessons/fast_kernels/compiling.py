"""torch.compile, measured: what a compile costs, what the compiled step gains, when that
pays, and how often changing shapes make it compile again.

TorchDynamo captures the Python code into graphs, guarded by the shapes and types it saw;
TorchInductor turns each graph into fused kernels (C++/OpenMP on CPUs, Triton on GPUs).
A new shape that breaks a guard means a new compile ("recompile"). Counting recompiles needs
only TorchDynamo, so `count_graphs` uses `backend="eager"`: no kernels are generated and it
runs in seconds anywhere. See https://pytorch.org/docs/stable/torch.compiler.html and
Ansel et al., "PyTorch 2", ASPLOS 2024 (https://doi.org/10.1145/3620665.3640366).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch

from ...device import get_device, synchronize
from ...inductor import can_compile  # noqa: F401  (the lesson's API: lesson.can_compile)
from ...measure import compare, steady_cpu


def recompile_limit() -> int:
    """Recompiles allowed per function before dynamo gives up and runs it eagerly
    (`recompile_limit`; older versions call it `cache_size_limit`)."""
    import torch._dynamo

    config = torch._dynamo.config
    return int(getattr(config, "recompile_limit", getattr(config, "cache_size_limit", 8)))


@dataclass
class GraphCount:
    """How many graphs dynamo compiled for a run over several input shapes."""

    label: str
    inputs: int
    distinct_shapes: int
    graphs: int
    seconds: float

    @property
    def hit_limit(self) -> bool:
        """More shapes than graphs at the recompile limit: the rest ran eagerly."""
        return self.graphs >= recompile_limit() and self.distinct_shapes > self.graphs


def count_graphs(
    fn: Callable, inputs: Iterable[torch.Tensor], *, dynamic: bool | None, label: str = ""
) -> GraphCount:
    """Compile `fn` afresh with TorchDynamo only (backend="eager") and count the graphs it
    builds over `inputs`. dynamic=False: one graph per new shape, until recompile_limit;
    None (the default): the first shape change marks that dimension dynamic, and one more
    graph serves every later size."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(fn, backend="eager", dynamic=dynamic)
    inputs = list(inputs)
    start = time.perf_counter()
    for x in inputs:
        compiled(x)
    seconds = time.perf_counter() - start
    graphs = int(counters["stats"]["unique_graphs"])
    shapes = len({tuple(x.shape) for x in inputs})
    return GraphCount(label, len(inputs), shapes, graphs, seconds)


def graph_counts(images, *, bucket_batches, pad_collate, n_batches: int = 12) -> list[GraphCount]:
    """Graphs compiled for the first `n_batches` batches of a small conv net, without
    bucketing (sorted by size, each batch padded to its own max) and with yours, with
    dynamic=False and with the default automatic dynamic shapes."""
    from .demo import BATCH, conv_net, pad_to_batch_max, sorted_batches

    sizes = [tuple(im.shape[1:]) for im in images]
    plain = sorted_batches(sizes, BATCH)[:n_batches]
    mine = list(bucket_batches(sizes, BATCH))[:n_batches]
    inputs = {
        "no bucketing": [pad_to_batch_max([images[i] for i in b]).float() for b in plain],
        "your bucketing": [pad_collate([images[i] for i in b]).float() for b in mine],
    }
    net = conv_net(8, torch.device("cpu"))
    runs = []
    with torch.no_grad():
        for name, xs in inputs.items():
            for dynamic, how in ((False, "dynamic=False"), (None, "default")):
                runs.append(count_graphs(net, xs, dynamic=dynamic, label=f"{name}, {how}"))
    torch._dynamo.reset()
    return runs


@dataclass
class CompileTiming:
    """One model, eager and compiled: the first compiled call (compile + one step), and both
    steady states measured after warm-up, interleaved."""

    first_call_s: float
    eager_step_s: float
    compiled_step_s: float


def time_compile(
    eager: Callable[[], None],
    compiled: Callable[[], None],
    device: torch.device,
    *,
    repeats: int,
    warmup: int,
) -> CompileTiming:
    """The first compiled call timed alone (it compiles, then runs one step); then both steady
    states after `warmup` calls each, timed in interleaved pairs (lesson 00's `compare`)."""
    synchronize(device)  # start from an idle device
    start = time.perf_counter()
    compiled()  # traces, compiles, then runs one step
    synchronize(device)  # GPU kernels run asynchronously: wait for the step to end
    first = time.perf_counter() - start
    result = compare(eager, compiled, repeats=repeats, warmup=warmup, labels=("eager", "compiled"))
    return CompileTiming(first, result.baseline.median, result.candidate.median)


def compile_timing(model: torch.nn.Module, x: torch.Tensor, *, repeats: int = 10) -> CompileTiming:
    """Time a training step (forward + backward) eager and under torch.compile (inductor),
    with `time_compile`; three warm-up calls, as the backward graph and autotuning also
    settle in the first compiled calls."""
    compiled = torch.compile(model)

    def step(m) -> Callable[[], None]:
        def run() -> None:
            m(x).sum().backward()
            model.zero_grad(set_to_none=True)

        return run

    return time_compile(step(model), step(compiled), x.device, repeats=repeats, warmup=3)


def dynamo_timing(repeats: int = 6) -> CompileTiming:
    """A real, cheap measurement anywhere: the SENet's forward compiled by TorchDynamo alone
    (backend="eager": graphs captured, no kernels generated), so the first call pays the
    tracing and the steady state gains nothing."""
    from .layout import SENet, images

    torch._dynamo.reset()
    model, x = SENet(width=8).eval(), images(8)
    compiled = torch.compile(model, backend="eager")
    with torch.no_grad(), steady_cpu(1):
        timing = time_compile(
            lambda: model(x), lambda: compiled(x), x.device, repeats=repeats, warmup=2
        )
    torch._dynamo.reset()
    return timing


def pointwise_chain(x: torch.Tensor) -> torch.Tensor:
    """Five elementwise ops: eager runs five kernels and writes four temporaries to memory;
    inductor fuses them into one loop that reads x once and writes once."""
    y = x * torch.sigmoid(x)
    return (y * 0.5 + 1.0).clamp_(min=0).square()


def fusion_timing(numel: int = 2**22) -> tuple[float, float]:
    """(compile seconds, eager / compiled speedup) of `pointwise_chain`, a memory-bound case."""
    x = torch.randn(numel, device=get_device())
    compiled = torch.compile(pointwise_chain)
    start = time.perf_counter()
    compiled(x)
    synchronize(x.device)
    compile_s = time.perf_counter() - start
    compiled(x)
    result = compare(lambda: pointwise_chain(x), lambda: compiled(x), repeats=10, warmup=2)
    return compile_s, result.speedup
