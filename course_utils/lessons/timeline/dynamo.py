"""What TorchDynamo makes of a model, counted in seconds on any machine (backend "eager": no
kernels generated): its graphs and graph breaks (`torch._dynamo.explain`, what
TORCH_LOGS=graph_breaks prints), and how often it compiles again over a run of calls
(`torch._dynamo.utils.counters`, what TORCH_LOGS=recompiles prints). See
https://docs.pytorch.org/docs/stable/torch.compiler_troubleshooting.html.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn


@dataclass
class Graphs:
    """One call under Dynamo: graphs, breaks and the reason of each."""

    graphs: int
    breaks: int
    reasons: list[str] = field(default_factory=list)


def graphs(module: nn.Module, *args) -> Graphs:
    """`torch._dynamo.explain` on `module(*args)`, with Dynamo's default settings and a fresh
    cache (a setting changed elsewhere in the notebook does not count)."""
    import torch._dynamo

    torch._dynamo.reset()
    with torch._dynamo.config.patch(capture_scalar_outputs=False):
        out = torch._dynamo.explain(module)(*args)
    torch._dynamo.reset()
    reasons = [str(r.reason).strip().splitlines()[0] for r in out.break_reasons]
    return Graphs(out.graph_count, out.graph_break_count, reasons)


def compiles(model: nn.Module, x: torch.Tensor, calls: int = 4) -> int:
    """How many times Dynamo compiled `torch.compile(model)`'s frames over `calls` forward
    calls on the same input: 1 per graph for a model that compiles once; more where a guard
    fails at every call (it recompiles, up to torch._dynamo.config.recompile_limit, then
    runs that frame eagerly)."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(model, backend="eager")
    with torch.no_grad():
        for _ in range(calls):
            compiled(x)
    found = int(counters["stats"]["unique_graphs"])
    torch._dynamo.reset()
    return found
