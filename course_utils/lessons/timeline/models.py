"""Exercise 2's models: stacks of one repeated block, as real training code writes them, each
with one habit that matters to `torch.compile` (or none).

- "stack": blocks and a head, nothing else: one graph, whole or per block.
- "logs-norm": the forward hands the dashboard `float(x.norm())` after the blocks: a graph
  break outside the blocks (`.item()` needs the value in Python).
- "clamps": each block clamps its output only where it grew large (`if h.abs().max() > ...`):
  a data-dependent branch, so a graph break inside every block.
- "counts-calls": the forward counts its calls in a Python int and uses it (a schedule):
  Dynamo guards on the int's value, so compiling the whole model recompiles at every call,
  until its recompile limit, then runs it eagerly; the blocks never see the counter.

The regional recipe compiles `model.blocks`' blocks one by one (`block.compile()`): the same
code object and guards serve every block, so one block's compile serves them all
(https://pytorch.org/tutorials/recipes/regional_compilation.html).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

WIDTH, DEPTH, BATCH, CLASSES = 128, 6, 256, 10
MODELS = ("stack", "logs-norm", "clamps", "counts-calls")


def rms_norm(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """RMSNorm written out, as many models do: five elementwise passes over x eagerly."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * weight


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    """GELU's tanh approximation written out: seven elementwise passes eagerly, one fused."""
    return 0.5 * x * (1.0 + torch.tanh(0.7978845608 * (x + 0.044715 * x.pow(3))))


class Block(nn.Module):
    """A pre-norm residual MLP block (a transformer's trunk without attention), its norm and
    activation written out elementwise: what Inductor fuses, and eager runs pass by pass."""

    def __init__(self, width: int = WIDTH) -> None:
        super().__init__()
        self.norm = nn.Parameter(torch.ones(width))
        self.up = nn.Linear(width, 2 * width)
        self.down = nn.Linear(2 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(gelu_tanh(self.up(rms_norm(x, self.norm))))


class ClampingBlock(Block):
    """The block, clamping its output only when it grew large: Python must see the maximum."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.down(gelu_tanh(self.up(rms_norm(x, self.norm))))
        if h.abs().max() > 50:  # a data-dependent branch: a graph break
            h = h.clamp(-50, 50)
        return x + h


class Net(nn.Module):
    """`depth` blocks in `self.blocks`, then a head; `habit` is one of MODELS."""

    def __init__(self, habit: str = "stack", depth: int = DEPTH, width: int = WIDTH) -> None:
        super().__init__()
        if habit not in MODELS:
            raise ValueError(f"habit must be one of {MODELS}, not {habit!r}")
        block = ClampingBlock if habit == "clamps" else Block
        self.habit = habit
        self.blocks = nn.ModuleList(block(width) for _ in range(depth))
        self.head = nn.Linear(width, CLASSES)
        self.calls = 0
        self.last_norm = 0.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.habit == "counts-calls":
            self.calls += 1
            x = x * (1.0 + 0.01 * (self.calls % 3))  # a schedule read from a Python int
        for block in self.blocks:
            x = block(x)
        if self.habit == "logs-norm":
            self.last_norm = float(x.norm())  # for the dashboard: a graph break
        return self.head(x)


def build(habit: str, seed: int = 0, depth: int = DEPTH) -> Net:
    torch.manual_seed(seed)
    return Net(habit, depth)


def batch(seed: int = 1, rows: int = BATCH) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, WIDTH, generator=g), torch.randint(0, CLASSES, (rows,), generator=g)


def train_step(model: nn.Module, data) -> None:
    """Forward, loss, backward: the step every plan compiles and times."""
    x, y = data
    F.cross_entropy(model(x), y).backward()


def apply(model: Net, where: str, **options) -> nn.Module:
    """`model` compiled `where` ("none", "whole" or "blocks"), with torch.compile's options:
    what the training loop then calls."""
    if where == "none":
        return model
    if where == "whole":
        return torch.compile(model, **options)
    if where == "blocks":
        for block in model.blocks:
            block.compile(**options)
        return model
    raise ValueError(f"where must be 'none', 'whole' or 'blocks', not {where!r}")
