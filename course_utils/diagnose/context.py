"""What every detector reads (the loop, the device, the window) and where it writes."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from .findings import Finding
from .run import Window


@dataclass
class Context:
    model: nn.Module
    optimizer: torch.optim.Optimizer
    loader: object
    device: torch.device
    device_class: str
    window: Window
    cudnn_benchmark: bool  # as the learner's step left it
    findings: list[Finding] = field(default_factory=list)
    ok: list[str] = field(default_factory=list)
    not_checked: list[str] = field(default_factory=list)

    def add(self, finding: Finding) -> None:
        self.findings.append(finding)

    @property
    def inputs(self) -> tuple[tuple, dict]:
        return self.window.seen.inputs

    @property
    def loop_dtype(self) -> torch.dtype | None:
        """The autocast dtype the learner's forward ran under (None: no autocast). Probes run
        in it: channels_last or a larger batch judged in fp32 would miss what an AMP loop
        gains (tensor cores take NHWC fp16/bf16, not fp32)."""
        used = sorted((d for d in self.window.seen.autocast if d is not None), key=str)
        return used[0] if used else None

    @property
    def base_model(self) -> nn.Module:
        """The model without DDP or torch.compile wrappers: what the probes copy."""
        m = self.model
        m = getattr(m, "module", m) if isinstance(m, nn.parallel.DistributedDataParallel) else m
        return getattr(m, "_orig_mod", m)
