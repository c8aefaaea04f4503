"""The models lesson 13 shards, and the optimizers it builds for them.

`Net` is a stack of residual MLP blocks (`model.blocks`) and a head: the shape of a
transformer's trunk without attention, so that "one FSDP group per block" means what it
means for a real model. Every model is built from a seed, the same in every process.
Optimizers work one parameter at a time (`foreach=False`): their scratch space is the size
of one parameter, not of all of them, so what a rank holds is what the state says.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

STRATEGIES = ("ddp", "zero1", "fsdp")  # DDP, ZeroRedundancyOptimizer (ZeRO-1), FSDP2
OPTIMIZERS = ("sgd", "momentum", "adam")  # no state, one buffer, two moments (+ a step)
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


class Block(nn.Module):
    """x + W2 gelu(W1 x): a transformer's MLP block."""

    def __init__(self, width: int, hidden: int) -> None:
        super().__init__()
        self.up = nn.Linear(width, hidden)
        self.down = nn.Linear(hidden, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(nn.functional.gelu(self.up(x)))


class Net(nn.Module):
    """`depth` blocks of width `width` (hidden 4x), then a linear head to `classes`.
    `frozen`: the first blocks do not train (a fine-tuning set-up)."""

    def __init__(self, width=64, depth=4, classes=10, frozen=0, hidden=None) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(width, hidden or 4 * width) for _ in range(depth))
        self.head = nn.Linear(width, classes)
        for block in self.blocks[:frozen]:
            block.requires_grad_(False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x)


@dataclass(frozen=True)
class Spec:
    """How to build one model, in every process alike."""

    width: int = 64
    depth: int = 4
    classes: int = 10
    frozen: int = 0
    hidden: int | None = None
    dtype: str = "float32"
    seed: int = 0

    def build(self) -> Net:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            net = Net(self.width, self.depth, self.classes, self.frozen, self.hidden)
        return net.to(DTYPES[self.dtype])

    def batch(self, n: int, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(n, self.width, generator=g).to(DTYPES[self.dtype])
        return x, torch.randint(0, self.classes, (n,), generator=g)


def trainable(model: nn.Module) -> list[nn.Parameter]:
    return [p for p in model.parameters() if p.requires_grad]


def make_optimizer(name: str, params, lr: float = 1e-2) -> torch.optim.Optimizer:
    """`sgd` keeps no state, `momentum` one buffer per parameter, `adam` two moments and a
    step counter per parameter."""
    return optimizer_class(name)(params, **optimizer_kwargs(name, lr))


def optimizer_class(name: str) -> type[torch.optim.Optimizer]:
    if name not in OPTIMIZERS:
        raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {name!r}")
    return torch.optim.Adam if name == "adam" else torch.optim.SGD


def optimizer_kwargs(name: str, lr: float = 1e-2) -> dict:
    extra = {"momentum": 0.9} if name == "momentum" else {}
    return {"lr": lr, "foreach": False, **extra}


def loss_of(model: nn.Module, batch) -> torch.Tensor:
    x, y = batch
    return nn.functional.cross_entropy(model(x).float(), y)
