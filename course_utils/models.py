"""Small models for the lessons: fast enough for a CPU in quick mode, real enough to teach."""

from __future__ import annotations

import torch
from torch import nn


def conv_bn(c_in: int, c_out: int, *, bias: bool = False, norm: bool = True) -> nn.Sequential:
    """3x3 conv, BatchNorm, ReLU. A bias before BatchNorm is redundant (BN subtracts the mean),
    so it is off by default; lesson 09 turns it on to show that."""
    layers: list[nn.Module] = [nn.Conv2d(c_in, c_out, 3, padding=1, bias=bias)]
    if norm:
        layers.append(nn.BatchNorm2d(c_out))
    layers.append(nn.ReLU(inplace=True))
    return nn.Sequential(*layers)


class Residual(nn.Module):
    def __init__(self, c: int, **kw):
        super().__init__()
        self.block = nn.Sequential(conv_bn(c, c, **kw), conv_bn(c, c, **kw))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.block(x)


class ResNet9(nn.Module):
    """The ResNet-9 of the DAWNBench CIFAR-10 speed-runs (Page 2018), width configurable.

    width=64 is the original (about 6.5M parameters); width=16 trains in a minute on a CPU.
    """

    def __init__(
        self, num_classes: int = 10, width: int = 64, *, bias: bool = False, norm: bool = True
    ):
        super().__init__()
        w, kw = width, {"bias": bias, "norm": norm}
        self.net = nn.Sequential(
            conv_bn(3, w, **kw),
            conv_bn(w, 2 * w, **kw),
            nn.MaxPool2d(2),
            Residual(2 * w, **kw),
            conv_bn(2 * w, 4 * w, **kw),
            nn.MaxPool2d(2),
            conv_bn(4 * w, 8 * w, **kw),
            nn.MaxPool2d(2),
            Residual(8 * w, **kw),
            nn.AdaptiveMaxPool2d(1),
            nn.Flatten(),
            nn.Linear(8 * w, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class SmallCNN(nn.Module):
    """Three conv blocks and a linear head: the quickest model that learns the image sets."""

    def __init__(
        self, num_classes: int = 10, width: int = 32, *, bias: bool = False, norm: bool = True
    ):
        super().__init__()
        kw = {"bias": bias, "norm": norm}  # norm=False: no BatchNorm (lesson 03's tip 17 grid)
        self.net = nn.Sequential(
            conv_bn(3, width, **kw),
            nn.MaxPool2d(2),
            conv_bn(width, 2 * width, **kw),
            nn.MaxPool2d(2),
            conv_bn(2 * width, 4 * width, **kw),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(4 * width, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class MLP(nn.Module):
    """`depth` blocks of Linear + ReLU of width `hidden`: activation memory grows with depth,
    which makes it the specimen for memory lessons (checkpointing, batch size)."""

    def __init__(self, dim: int = 256, hidden: int = 1024, depth: int = 4, out: int = 10):
        super().__init__()
        blocks, d = [], dim
        for _ in range(depth):
            blocks += [nn.Linear(d, hidden), nn.ReLU()]
            d = hidden
        self.blocks = nn.Sequential(*blocks)
        self.head = nn.Linear(d, out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(x))


class SeqRNN(nn.Module):
    """A vanilla tanh RNN reading a sequence and predicting one value per sequence.

    With a recurrent weight scaled above 1 (`recurrent_scale`), gradients through time grow
    exponentially: the specimen for the gradient-clipping lesson.
    """

    def __init__(self, input_size: int = 1, hidden: int = 64, recurrent_scale: float = 1.0):
        super().__init__()
        self.rnn = nn.RNN(input_size, hidden, batch_first=True, nonlinearity="tanh")
        with torch.no_grad():
            q, _ = torch.linalg.qr(torch.randn(hidden, hidden))
            self.rnn.weight_hh_l0.copy_(q * recurrent_scale)
        self.head = nn.Linear(hidden, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(x)
        return self.head(out[:, -1]).squeeze(-1)


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
