"""Tensor parallelism written out: Megatron-LM's MLP (Shoeybi et al. 2019, arXiv 1909.08053,
section 3) over the ranks of the default process group.

`up`'s weight is split by rows (each rank computes hidden / world of the hidden units: a
*column-parallel* layer, each rank a column block of the weight matrix as the paper writes
it, X·A), `down`'s by columns (each rank multiplies its own hidden units: *row-parallel*), so
each rank ends with a partial sum of the block's output. The paper's two conjugate operators
move the data: `f` is the identity forward and an all-reduce of the input's gradient backward,
`g` an all-reduce forward and the identity backward.
"""

from __future__ import annotations

import copy

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn


class ToParallel(torch.autograd.Function):
    """Megatron's f: every rank already has the input; in backward each rank holds only its
    part of the input's gradient (from its own hidden units), so they are summed."""

    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous().clone()
        dist.all_reduce(grad)
        return grad


class FromParallel(torch.autograd.Function):
    """Megatron's g: each rank holds a partial sum of the output; forward sums them, and the
    gradient of a sum is the same on every rank, so backward passes it on."""

    @staticmethod
    def forward(ctx, partial):
        total = partial.contiguous().clone()
        dist.all_reduce(total)
        return total

    @staticmethod
    def backward(ctx, grad):
        return grad


class HandBlock(nn.Module):
    """A model.Block split by hand over the default group: this rank's rows of `up`, its
    columns of `down`, the norm and `down`'s bias whole on every rank."""

    def __init__(self, block: nn.Module):
        super().__init__()
        rank, world = dist.get_rank(), dist.get_world_size()
        share = block.up.out_features // world
        mine = slice(rank * share, (rank + 1) * share)
        self.norm = copy.deepcopy(block.norm)
        self.up_weight = nn.Parameter(block.up.weight.detach()[mine].clone())
        self.up_bias = nn.Parameter(block.up.bias.detach()[mine].clone())
        self.down_weight = nn.Parameter(block.down.weight.detach()[:, mine].clone())
        self.down_bias = nn.Parameter(block.down.bias.detach().clone())

    def forward(self, x):
        h = self.norm(x) if self.norm is not None else x
        h = ToParallel.apply(h)  # f: nothing to send now; all-reduce of the gradient later
        h = torch.relu(F.linear(h, self.up_weight, self.up_bias))  # my hidden units only
        partial = F.linear(h, self.down_weight)  # my hidden units' share of the output
        return x + FromParallel.apply(partial) + self.down_bias  # g: one all-reduce
