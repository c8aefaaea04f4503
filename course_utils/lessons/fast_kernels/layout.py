"""channels_last: a network with a squeeze-and-excitation layer written the old way, and a
tracer that finds the first layer whose output is no longer in the channels_last layout.

A channels_last tensor keeps its logical NCHW shape; only the strides change, so pixels of
one position are adjacent across channels (NHWC in memory). Convolution kernels in oneDNN
(CPUs) and cuDNN tensor-core paths (GPUs) prefer that order. One `.contiguous()` on the way
silently converts back to NCHW, and every layer after it pays for a conversion, or runs the
slower NCHW kernel. See https://pytorch.org/tutorials/intermediate/memory_format_tutorial.html
"""

from __future__ import annotations

import copy
import statistics
import time
from dataclasses import dataclass

import torch
from torch import nn

from ...device import synchronize
from ...models import conv_bn

CL = torch.channels_last


class LegacySqueezeExcite(nn.Module):
    """Squeeze-and-excitation (Hu et al. 2018, https://arxiv.org/abs/1709.01507): a per-channel
    gate computed from the channel means. Its forward is as an older codebase wrote it: the
    `.contiguous()` that `view` needed silently converts a channels_last input to NCHW."""

    def __init__(self, channels: int, reduction: int = 4):
        super().__init__()
        self.fc1 = nn.Linear(channels, channels // reduction)
        self.fc2 = nn.Linear(channels // reduction, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c = x.shape[:2]
        x = x.contiguous()  # view needs contiguous memory
        squeezed = x.view(b, c, -1).mean(-1)
        gate = torch.sigmoid(self.fc2(torch.relu(self.fc1(squeezed))))
        return x * gate.view(b, c, 1, 1)


class SEBlock(nn.Module):
    """Two 3x3 conv-BN-ReLU layers, the SE gate, and a residual connection."""

    def __init__(self, channels: int, se: type[nn.Module]):
        super().__init__()
        self.convs = nn.Sequential(conv_bn(channels, channels), conv_bn(channels, channels))
        self.se = se(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.se(self.convs(x))


class SENet(nn.Module):
    """A small SE-ResNet for 32x32 images; `se` is the class of its gate layers."""

    def __init__(
        self, width: int = 16, se: type[nn.Module] = LegacySqueezeExcite, classes: int = 10
    ):
        super().__init__()
        self.stem = nn.Sequential(conv_bn(3, width), conv_bn(width, 2 * width), nn.MaxPool2d(2))
        self.block1 = SEBlock(2 * width, se)
        self.down = nn.Sequential(conv_bn(2 * width, 4 * width), nn.MaxPool2d(2))
        self.block2 = SEBlock(4 * width, se)
        self.head = nn.Sequential(
            nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4 * width, classes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.block2(self.down(self.block1(self.stem(x)))))


def legacy_net(width: int = 16, seed: int = 0) -> nn.Module:
    """The legacy SENet, its weights drawn from `seed`, in eval mode."""
    torch.manual_seed(seed)
    return SENet(width, LegacySqueezeExcite).eval()


def make_pair(se: type[nn.Module], width: int = 16, seed: int = 0) -> tuple[nn.Module, nn.Module]:
    """(legacy SENet, SENet with gate `se`) with identical weights, both in eval mode."""
    legacy = legacy_net(width, seed)
    other = SENet(width, se)
    other.load_state_dict(legacy.state_dict())
    return legacy, other.eval()


def is_cl(t: torch.Tensor) -> bool:
    """True for a 4-D tensor stored channels_last (and not only NCHW). A tensor with one
    channel or one pixel is both; it counts as channels_last, as nothing is lost there."""
    return t.dim() != 4 or t.is_contiguous(memory_format=CL)


def nchw_weights(model: nn.Module) -> list[str]:
    """Names of 4-D parameters (conv weights) that are not channels_last."""
    return [n for n, p in model.named_parameters() if p.dim() == 4 and not is_cl(p)]


@dataclass
class LayoutLoss:
    """Where the channels_last layout was lost: the module, and what came in and went out."""

    module: str
    kind: str
    in_cl: bool

    def __str__(self) -> str:
        came = "a channels_last input" if self.in_cl else "its input"
        return f"`{self.module}` ({self.kind}) turned {came} into an NCHW output"


def layout_trace(
    model: nn.Module, x: torch.Tensor, memory_format: torch.memory_format | None = None
) -> list[LayoutLoss]:
    """Run `model(x)` and list every module whose 4-D output is not channels_last, outermost
    last; the first entry is where the layout was lost. With `memory_format`, a copy of the
    model and the input are put in that format first (how is exercise 2's first part)."""
    if memory_format is not None:
        model = copy.deepcopy(model).to(memory_format=memory_format)
        x = x.contiguous(memory_format=memory_format)
    losses: list[LayoutLoss] = []
    handles = []

    def hook(name):
        def record(module, args, out):
            if isinstance(out, torch.Tensor) and not is_cl(out):
                inp = args[0] if args and isinstance(args[0], torch.Tensor) else None
                losses.append(
                    LayoutLoss(
                        name or "model", type(module).__name__, inp is not None and is_cl(inp)
                    )
                )

        return record

    for name, module in model.named_modules():
        handles.append(module.register_forward_hook(hook(name)))
    try:
        with torch.no_grad():
            model(x)
    finally:
        for h in handles:
            h.remove()
    return losses


GATE_CHANNELS = 32


def gate_input(seed: int = 1) -> torch.Tensor:
    """A channels_last input for one SE gate, with large channel means, where a different
    pooling shows; the whole network damps such a difference ~1e4-fold."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(4, GATE_CHANNELS, 8, 8, generator=g)
    return (x + torch.randn(4, GATE_CHANNELS, 1, 1, generator=g) * 3).to(memory_format=CL)


def legacy_gate(seed: int = 1) -> nn.Module:
    """The legacy gate, its weights drawn from `seed`."""
    torch.manual_seed(seed)
    return LegacySqueezeExcite(GATE_CHANNELS)


def gate_output(squeeze_excite: type[nn.Module], run=lambda fn, *a: fn(*a), seed: int = 1):
    """One gate of class `squeeze_excite` alone, with the legacy gate's weights, on
    `gate_input(seed)`. `run(fn, *args)` calls the gate (the check marks it)."""
    mine = squeeze_excite(GATE_CHANNELS)
    mine.load_state_dict(legacy_gate(seed).state_dict())
    with torch.no_grad():
        return run(mine, gate_input(seed))


def train_step(model: nn.Module, x: torch.Tensor):
    """One fp32 forward + backward of `model` on `x`, gradients dropped after."""

    def step() -> None:
        model(x).sum().backward()
        model.zero_grad(set_to_none=True)

    return step


def images(batch: int = 32, size: int = 32, seed: int = 0) -> torch.Tensor:
    return torch.randn(batch, 3, size, size, generator=torch.Generator().manual_seed(seed))


def layout_timings(
    gates: dict[str, type[nn.Module] | None], *, repeats: int = 8
) -> dict[str, float]:
    """Median seconds per training step of the SENet for each variant: key -> gate class,
    where None means NCHW with the legacy gate, and a class channels_last with that gate.

    All variants are timed together by `time_in_rotation`: on one CPU thread (steady on a
    shared machine), or on CUDA under autocast with a wider net and batch so the GPU is not idle.
    """
    from ...device import get_device
    from ...measure import steady_cpu

    device = get_device()
    cuda = device.type == "cuda"
    width, batch = (64, 256) if cuda else (16, 32)
    x = images(batch).to(device)
    torch.manual_seed(0)
    base = SENet(width).to(device).train()
    steps = {}
    for name, gate in gates.items():
        model = SENet(width, gate or LegacySqueezeExcite).to(device)
        model.load_state_dict(base.state_dict())
        fmt = torch.contiguous_format if gate is None else CL
        steps[name] = _step(model.to(memory_format=fmt).train(), x.to(memory_format=fmt), cuda)
    with steady_cpu(1):
        return time_in_rotation(steps, repeats, device)


def time_in_rotation(steps: dict, repeats: int, device: torch.device) -> dict[str, float]:
    """Median seconds per call of each step, timed in rounds in a rotating order (A B C,
    B C A, ...) so that a change in machine load hits every variant alike."""
    names, samples = list(steps), {name: [] for name in steps}
    for r in range(repeats + 2):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            synchronize(device)  # nothing of the previous step still queued
            start = time.perf_counter()
            steps[name]()
            synchronize(device)  # GPU kernels run asynchronously: wait until this step's end
            if r >= 2:  # two warm-up rounds: allocations, kernel selection
                samples[name].append(time.perf_counter() - start)
    return {name: statistics.median(times) for name, times in samples.items()}


def _step(model: nn.Module, x: torch.Tensor, autocast: bool):
    from ...device import amp_dtype

    def run() -> None:
        with torch.autocast(x.device.type, dtype=amp_dtype(x.device), enabled=autocast):
            model(x).float().sum().backward()
        model.zero_grad(set_to_none=True)

    return run


def gate_or_reference(gate: type[nn.Module]) -> type[nn.Module]:
    """The learner's gate class if its forward is written, else the lesson's (said once)."""
    from ...answers import is_withheld
    from ...errors import ReferenceWithheld
    from .reference import ReferenceSqueezeExcite

    try:
        gate(8)(torch.randn(1, 8, 2, 2))
        return gate
    except NotImplementedError:
        if is_withheld(ReferenceSqueezeExcite):  # the learner edition: nothing to fall back on
            raise ReferenceWithheld(
                "ReferenceSqueezeExcite",
                "SqueezeExcite is not written yet, and the learner edition has no reference "
                "gate to time instead",
            ) from None
        print("(SqueezeExcite is not written yet: this demo uses the lesson's reference.)")
        return ReferenceSqueezeExcite


def layout_verdict(times: dict[str, float], device_class: str, noise: float = 0.05) -> str:
    """What the three timings of `layout_timings` say, in words, with the measured ratios."""
    gain = times["NCHW"] / times["channels_last, fixed gate"]
    lost = times["NCHW"] / times["channels_last, legacy gate"]
    head = f"channels_last speedup on {device_class}: {gain:.2f}x with the fixed gate, {lost:.2f}x with the legacy one. "
    if gain < 1 + noise:
        return (
            head
            + "The layout does not pay for this model here: keep NCHW, or measure a larger model."
        )
    if lost >= gain * (1 - noise):
        return head + (
            "The layout pays; the conversions forced by the legacy gate cost little next to the "
            "convolutions of this model."
        )
    return head + "The layout pays, and the legacy gate gives part of it back: fix such layers."
