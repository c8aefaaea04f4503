"""torch.compile on a transformer block: graph breaks found with TorchDynamo's `explain`, and
the time to the first compiled step against the steady one.

TorchDynamo turns Python into graphs; where it meets something it cannot put in a graph (a
tensor read back as a Python number, data-dependent control flow, an unsupported call) it
ends the graph, runs that bit in Python, and starts a new graph: a *graph break*
(https://docs.pytorch.org/docs/stable/torch.compiler_troubleshooting.html). Counting graphs
needs TorchDynamo only (`backend="eager"`), so it runs in seconds on any machine; generating
kernels (TorchInductor) needs a C++ compiler on a CPU and Triton on a GPU.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from torch import nn

from ...device import synchronize
from ...inductor import can_compile  # noqa: F401  (the lesson's API: lesson.can_compile)
from ...measure import compare
from .model import Block, Config


class ColleagueBlock(Block):
    """A colleague's transformer block: the lesson's Block, plus the RMS of the attention
    output recorded for the training dashboard (`last_rms`), and an input check."""

    def forward(self, x, doc_ids=None):
        assert x.dim() == 3, "expects (batch, time, channels)"
        h = self.attn(self.ln1(x), doc_ids)
        x = x + h
        self.last_rms = h.pow(2).mean().sqrt().item()  # for the dashboard
        return x + self.mlp(self.ln2(x))


BLOCK_CONFIG = Config(d_model=64, n_head=4, n_layer=1, max_len=128)


def block_pair(cls: type[nn.Module], seed: int = 0) -> tuple[nn.Module, nn.Module]:
    """(the colleague's block, a `cls` block with the very same weights)."""
    torch.manual_seed(seed)
    colleague = ColleagueBlock(BLOCK_CONFIG)
    mine = cls(BLOCK_CONFIG)
    mine.load_state_dict(colleague.state_dict())
    return colleague, mine


def block_input(B: int = 2, T: int = 24, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(B, T, BLOCK_CONFIG.d_model, generator=g)


@dataclass
class Graphs:
    """What TorchDynamo made of one call: graphs, breaks and why, ops captured."""

    graphs: int
    breaks: int
    ops: int
    reasons: list[str] = field(default_factory=list)  # "file:line: reason", one per break


def graphs_of(module: nn.Module, *args) -> Graphs:
    """torch._dynamo.explain on `module(*args)`, with Dynamo's default settings (a setting
    changed elsewhere in the notebook does not count) and a fresh cache."""
    import torch._dynamo

    torch._dynamo.reset()
    with torch._dynamo.config.patch(capture_scalar_outputs=False):
        out = torch._dynamo.explain(module)(*args)
    torch._dynamo.reset()
    reasons = []
    for r in out.break_reasons:
        where = r.user_stack[-1] if r.user_stack else None
        at = f"{where.filename.rsplit('/', 1)[-1]}:{where.lineno} `{(where.line or '').strip()}`"
        first = str(r.reason).strip().splitlines()[0]
        reasons.append(f"{at if where else '?'}: {first}")
    return Graphs(out.graph_count, out.graph_break_count, out.op_count, reasons)


@dataclass
class FirstStep:
    """A training step compiled: the first call alone (it compiles), then the steady state of
    eager and compiled, timed in interleaved pairs after warm-up."""

    backend: str
    first_s: float
    eager_s: float
    compiled_s: float


def first_vs_steady(
    module: nn.Module, x: torch.Tensor, *, backend: str = "inductor", repeats: int = 6
) -> FirstStep:
    """Time forward + backward of `module(x)`, eager and `torch.compile(module, backend=...)`."""
    import torch._dynamo

    torch._dynamo.reset()
    compiled = torch.compile(module, backend=backend)

    def step(m) -> Callable[[], None]:
        def run() -> None:
            m(x).square().mean().backward()
            module.zero_grad(set_to_none=True)

        return run

    eager, fast = step(module), step(compiled)
    synchronize(x.device)
    start = time.perf_counter()
    fast()
    synchronize(x.device)
    first = time.perf_counter() - start
    fast()
    result = compare(eager, fast, repeats=repeats, warmup=1, labels=("eager", "compiled"))
    return FirstStep(backend, first, result.baseline.median, result.candidate.median)


def normalised(x: torch.Tensor) -> torch.Tensor:
    """A helper with a data-dependent branch: Python must know the sum to pick a path, so
    TorchDynamo ends the graph there (one break, two graphs)."""
    y = torch.relu(x)
    if y.sum() > 0:
        y = y / y.sum()
    return 2 * y
