"""The lesson's model and the tensor-parallel layouts it is split by.

`Block` is a transformer's MLP block: an optional LayerNorm, a column of `up` (width -> hidden),
a ReLU, `down` (hidden -> width), added back to the block's input. `Layout` names one way to
split every block of a stack over `world` ranks with `parallelize_module`, and the shapes of a
training step: exercise 1 predicts what each layout sends, the check counts it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import nn

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}
# name -> what each block's plan does (the plans themselves: Layout.plan)
STYLES = {
    "megatron": "up ColwiseParallel(), down RowwiseParallel()",
    "sequence": "norm SequenceParallel(), up ColwiseParallel(input_layouts=Shard(1)), "
    "down RowwiseParallel(output_layouts=Shard(1))",
    "gathered": "up ColwiseParallel(output_layouts=Replicate()), down left whole",
    "split": "up left whole, down RowwiseParallel(input_layouts=Replicate())",
}


class Block(nn.Module):
    """x + down(relu(up(norm(x)))): the MLP half of a transformer block (norm optional)."""

    def __init__(self, width: int, hidden: int, norm: bool = True):
        super().__init__()
        self.norm = nn.LayerNorm(width) if norm else None
        self.up = nn.Linear(width, hidden)
        self.down = nn.Linear(hidden, width)

    def forward(self, x):
        h = self.norm(x) if self.norm is not None else x
        return x + self.down(torch.relu(self.up(h)))


class Net(nn.Module):
    """A stack of Blocks (`model.blocks`)."""

    def __init__(self, blocks: int, width: int, hidden: int, norm: bool = True):
        super().__init__()
        self.blocks = nn.ModuleList(Block(width, hidden, norm) for _ in range(blocks))

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return x


@dataclass(frozen=True)
class Layout:
    """Every block of a `Net(blocks, width, hidden, norm)` split over `world` ranks in one
    `style` (STYLES), trained one step on a batch of (batch, seq, width) in `dtype`. With
    "sequence" each rank is fed its own seq / world positions of every row; with the other
    styles every rank is fed the whole batch."""

    style: str
    blocks: int = 2
    norm: bool = True
    batch: int = 4
    seq: int = 6
    width: int = 8
    hidden: int = 32
    dtype: str = "float32"
    world: int = 2

    def __post_init__(self):
        if self.style not in STYLES:
            raise ValueError(f"style {self.style!r} is none of {list(STYLES)}")
        if self.hidden % self.world or (self.style == "sequence" and self.seq % self.world):
            raise ValueError("hidden (and seq, for 'sequence') must divide by world")
        if self.style == "sequence" and not self.norm:
            raise ValueError("the 'sequence' style splits each block's norm: norm=True")

    def plan(self) -> dict:
        """The `parallelize_module` plan of one block."""
        from torch.distributed.tensor import Replicate, Shard
        from torch.distributed.tensor.parallel import (
            ColwiseParallel,
            RowwiseParallel,
            SequenceParallel,
        )

        return {
            "megatron": lambda: {"up": ColwiseParallel(), "down": RowwiseParallel()},
            "sequence": lambda: {
                "norm": SequenceParallel(),
                "up": ColwiseParallel(input_layouts=Shard(1)),
                "down": RowwiseParallel(output_layouts=Shard(1)),
            },
            "gathered": lambda: {"up": ColwiseParallel(output_layouts=Replicate())},
            "split": lambda: {"down": RowwiseParallel(input_layouts=Replicate())},
        }[self.style]()

    def build(self, seed: int = 0) -> Net:
        """A fresh, unsplit model of this layout's shape (the same weights for every seed)."""
        torch.manual_seed(seed)
        return Net(self.blocks, self.width, self.hidden, self.norm).to(DTYPES[self.dtype])

    def batch_tensor(self, seed: int = 1) -> torch.Tensor:
        """The whole batch (batch, seq, width): data, so it needs no gradient."""
        g = torch.Generator().manual_seed(seed)
        return torch.randn(self.batch, self.seq, self.width, generator=g).to(DTYPES[self.dtype])

    def fed(self, rank: int, seed: int = 1) -> torch.Tensor:
        """What rank `rank` is fed: its seq / world positions for "sequence", else everything."""
        x = self.batch_tensor(seed)
        if self.style != "sequence":
            return x
        n = self.seq // self.world
        return x[:, rank * n : (rank + 1) * n].contiguous()

    def to_dict(self) -> dict:
        return asdict(self)

    def __str__(self) -> str:
        return (
            f"{self.style}: {self.blocks} block{'s' if self.blocks > 1 else ''} "
            f"{'with' if self.norm else 'without'} a norm, batch {self.batch} x seq {self.seq} "
            f"x width {self.width}, hidden {self.hidden}, {self.dtype}, {self.world} ranks"
        )


def parallelize(model: Net, layout: Layout, mesh) -> Net:
    """Every block of `model` split by `layout`'s plan, in place."""
    from torch.distributed.tensor.parallel import parallelize_module

    for block in model.blocks:
        parallelize_module(block, mesh, layout.plan())
    return model
