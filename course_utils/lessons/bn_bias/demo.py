"""Lesson 09's workloads: the cancellation in numbers, a model whose redundant biases hide in
custom blocks, a training step with and without them, and a net for conv+BN fusion."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from ...device import get_device
from ...measure import Comparison, compare, steady_cpu
from ...mode import pick
from ...models import ResNet9, conv_bn


def cancellation(seed: int = 0) -> dict[str, float]:
    """Conv+BN in train mode with bias b and with b replaced by b + 5: the largest output
    difference, next to how far the conv's own output moved."""
    torch.manual_seed(seed)
    conv, bn = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8)
    x = torch.randn(16, 3, 12, 12)
    with torch.no_grad():
        before_conv, before = conv(x), bn(conv(x))
        conv.bias += 5.0
        after_conv, after = conv(x), bn(conv(x))
    return {
        "conv output moved by": float((after_conv - before_conv).abs().max()),
        "BN output moved by": float((after - before).abs().max()),
    }


# --- a model whose redundant biases are not where module order says ------------------------


class BnRegisteredFirst(nn.Module):
    """conv -> BN, but the BN is registered first: order heuristics miss this one."""

    def __init__(self, c: int):
        super().__init__()
        self.bn = nn.BatchNorm2d(c)
        self.conv = nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x):
        return F.relu(self.bn(self.conv(x)))


class ReluThenBn(nn.Module):
    """conv -> ReLU -> BN: the ReLU sees the bias, so it is NOT redundant."""

    def __init__(self, c: int):
        super().__init__()
        self.conv, self.bn = nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c)

    def forward(self, x):
        return self.bn(F.relu(self.conv(x)))


class AddThenBn(nn.Module):
    """The conv output feeds a BN and also the residual sum, which goes on unnormalised
    through a ReLU: the bias matters."""

    def __init__(self, c: int):
        super().__init__()
        self.conv, self.bn = nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c)

    def forward(self, x):
        h = self.conv(x)
        return F.relu(self.bn(h) + h)


class BnThenConv(nn.Module):
    """Registered conv, BN; applied BN -> conv: no BN after the conv."""

    def __init__(self, c: int):
        super().__init__()
        self.conv, self.bn = nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c)

    def forward(self, x):
        return F.relu(self.conv(self.bn(x)))


class EvalRefine(nn.Module):
    """conv -> BN always; in eval mode a refinement conv (no BN) is added: unused in train
    mode, its bias still matters at inference."""

    def __init__(self, c: int):
        super().__init__()
        self.conv, self.bn = nn.Conv2d(c, c, 3, padding=1), nn.BatchNorm2d(c)
        self.refine = nn.Conv2d(c, c, 1)

    def forward(self, x):
        y = F.relu(self.bn(self.conv(x)))
        return y if self.training else y + self.refine(y)


class SumThenBn(nn.Module):
    """A linear whose output feeds a BN and a residual sum that a second BN normalises: the
    second use is invisible in the train-mode output (BN cancels the shift there too), so
    nudging the bias does not move it, yet the output goes into more than the BN. Its BNs
    are registered before the layer."""

    def __init__(self, c: int):
        super().__init__()
        self.bn2, self.bn, self.lin = nn.BatchNorm1d(c), nn.BatchNorm1d(c), nn.Linear(c, c)

    def forward(self, x):
        h = self.lin(x)
        return self.bn2(self.bn(h) + h)


def scenario_model(seed: int = 0, *, downstream_bn: bool = False) -> nn.Sequential:
    """Every case the checks grade, in one model, with non-trivial running statistics;
    `downstream_bn` appends a SumThenBn (module 12) for the bias check."""
    torch.manual_seed(seed)
    model = nn.Sequential(
        conv_bn(3, 8, bias=True),  # net.0.0: redundant
        BnRegisteredFirst(8),  # net.1.conv: redundant
        ReluThenBn(8),  # keep
        AddThenBn(8),  # keep
        BnThenConv(8),  # keep
        EvalRefine(8),  # .conv redundant, .refine keep
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, 16),  # redundant: feeds BatchNorm1d
        nn.BatchNorm1d(16),
        nn.ReLU(),
        nn.Linear(16, 10),  # keep
        *([SumThenBn(10)] if downstream_bn else []),  # 12.lin: keep
    )
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm1d | nn.BatchNorm2d):
                m.running_mean.uniform_(-1, 1)
                m.running_var.uniform_(0.5, 2)
            if getattr(m, "bias", None) is not None:
                m.bias.uniform_(-1, 1)
    return model


def small_variance_model(seed: int = 0) -> nn.Sequential:
    """Two conv -> BN pairs whose channels vary little, like channels that nearly died in
    training: running variances 1e-5..1e-4, matching what the convs produce on
    scenario_input(). BatchNorm's eps (1e-5) is then a large part of running_var + eps, so a
    fusion that leaves it out is off by O(1) here, where scenario_model's variances (0.5-2)
    hide it (by ~3e-6). Returned in train mode, as a training model."""
    torch.manual_seed(seed)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
        nn.Conv2d(8, 8, 1), nn.BatchNorm2d(8),
    ).eval()  # fmt: skip
    x = scenario_input()
    with torch.no_grad():
        for i in (0, 3):  # scale each conv's channels to the target variance, then measure
            conv, bn = model[i], model[i + 1]
            scale = (torch.logspace(-5, -4, 8) / model[: i + 1](x).var(dim=(0, 2, 3))).sqrt()
            conv.weight.mul_(scale.reshape(-1, 1, 1, 1))
            conv.bias.mul_(scale)
            h = model[: i + 1](x)
            bn.running_mean.copy_(h.mean(dim=(0, 2, 3)))
            bn.running_var.copy_(h.var(dim=(0, 2, 3)))
            bn.weight.uniform_(0.5, 1.5)
            bn.bias.uniform_(-0.5, 0.5)
    return model.train()


def scenario_input(seed: int = 1) -> torch.Tensor:
    return torch.randn(8, 3, 12, 12, generator=torch.Generator().manual_seed(seed))


# --- timing ---------------------------------------------------------------------------------


def train_step_comparison(repeats: int | None = None) -> Comparison:
    """A ResNet-9 training step with conv biases before BN vs without, interleaved."""
    batch, device = pick(quick=16, full=64), get_device()
    x = torch.randn(batch, 3, 32, 32, device=device)
    y = torch.randint(0, 10, (batch,), device=device)

    def step_of(model: nn.Module):
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

        def step() -> None:
            optimizer.zero_grad(set_to_none=True)
            F.cross_entropy(model(x), y).backward()
            optimizer.step()

        return step

    torch.manual_seed(0)
    with_bias = ResNet9(width=16, bias=True).to(device)
    without = ResNet9(width=16, bias=False).to(device)
    with steady_cpu(1):
        return compare(
            step_of(with_bias),
            step_of(without),
            repeats=repeats or pick(quick=12, full=30),
            labels=("bias before BN", "no bias"),
        )


def equal_work_ratios(repeats: int = 16) -> list[float]:
    """Two identical steps timed interleaved: the truth is "no effect"."""
    a, b = torch.randn(192, 192), torch.randn(192, 192)
    with steady_cpu(1):
        return compare(lambda: a @ b, lambda: a @ b, repeats=repeats, min_sample_s=0.03).ratios


def real_speedup_ratios(factor: int = 3, repeats: int = 16) -> list[float]:
    """A step doing `factor`/2 times the work of the candidate (1.5x by default): "faster"."""
    a, b = torch.randn(192, 192), torch.randn(192, 192)

    def work(n: int) -> None:
        for _ in range(n):
            a @ b

    with steady_cpu(1):
        return compare(
            lambda: work(factor), lambda: work(2), repeats=repeats, min_sample_s=0.03
        ).ratios


def pointwise_net(c: int = 4, depth: int = 8) -> nn.Sequential:
    """1x1 convs with few channels on large images: BN is a large share of inference time,
    so fusing it away shows on any device."""
    layers: list[nn.Module] = [nn.Conv2d(3, c, 1, bias=False), nn.BatchNorm2d(c), nn.ReLU()]
    for _ in range(depth):
        layers += [nn.Conv2d(c, c, 1, bias=False), nn.BatchNorm2d(c), nn.ReLU()]
    return nn.Sequential(*layers)


def fusion_cases() -> list[tuple[str, nn.Module, torch.Tensor]]:
    """(label, eval-mode model, input): a net where BN is a large share, and ResNet-9."""
    torch.manual_seed(0)
    batch = pick(quick=16, full=64)
    return [
        ("1x1-conv net", pointwise_net().eval(), torch.randn(8, 3, 128, 128)),
        ("ResNet-9 (width 16)", ResNet9(width=16).eval(), torch.randn(batch, 3, 32, 32)),
    ]


def inference_comparison(
    model: nn.Module, fused: nn.Module, x: torch.Tensor, repeats: int | None = None
) -> Comparison:
    """Eval forward of `model` vs `fused` on the course device, interleaved; samples of
    >= 0.1 s so that a busy moment on a shared machine averages out inside a sample."""
    device = get_device()
    model, fused, x = model.to(device).eval(), fused.to(device).eval(), x.to(device)
    with torch.no_grad(), steady_cpu(1):
        return compare(
            lambda: model(x),
            lambda: fused(x),
            repeats=repeats or pick(quick=8, full=20),
            warmup=2,
            min_sample_s=0.1,
            labels=("unfused", "fused"),
        )
