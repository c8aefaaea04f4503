"""What the AMP-step check observes while the learner's step trains: the forward's output
dtype, whether autocast was still on during backward, whether last step's gradients were
still in .grad when backward began, the size of the gradient reaching the output (a scaled
run shows up as ~2**16 too large), how far each parameter moved, and (`watch`) the calls the
step made and the gradients each optimizer.step() used (`course_utils.amp_calls.watch`)."""

from __future__ import annotations

import torch
from torch import nn


def autocast_on(device_type: str) -> bool:
    try:
        return torch.is_autocast_enabled(device_type)
    except TypeError:  # torch < 2.4 has no device argument
        return (
            torch.is_autocast_cpu_enabled() if device_type == "cpu" else torch.is_autocast_enabled()
        )


class StepProbe(nn.Module):
    """Wraps the model the learner's step trains: records the forward's output dtype, whether
    autocast was on during backward, and the size of the gradient reaching the output."""

    def __init__(self, inner: nn.Module, device_type: str = "cpu"):
        super().__init__()
        self.inner, self.device_type = inner, device_type
        self.out_dtypes: list[torch.dtype] = []
        self.backward_autocast: list[bool] = []
        self.out_grad_max: list[float] = []
        self.stale_grads: list[bool] = []  # per backward: .grad already held nonzero values

    def forward(self, x):
        out = self.inner(x)
        self.out_dtypes.append(out.dtype)
        if out.requires_grad:
            out.register_hook(self._on_grad)
        return out

    def _on_grad(self, grad):  # runs as backward reaches the output, before any parameter
        self.backward_autocast.append(autocast_on(self.device_type))
        self.stale_grads.append(
            any(p.grad is not None and bool(p.grad.ne(0).any()) for p in self.inner.parameters())
        )
        self.out_grad_max.append(grad.abs().max().item())


def params(model: nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in model.parameters()]


def worst_update(moved: list[torch.Tensor], ref_moved: list[torch.Tensor]) -> tuple[float, float]:
    """(error, size ratio) of the parameter tensor whose update is furthest from float32's.
    Per tensor, since the first layers' small gradients are the ones fp16 loses, and they
    hardly count in a norm over all parameters."""
    worst = (0.0, 1.0)
    for m, r in zip(moved, ref_moved, strict=True):
        r_norm = r.norm().clamp_min(1e-30)
        error = ((m - r).norm() / r_norm).item()
        if not error <= worst[0]:  # NaN counts as worst
            worst = (error, (m.norm() / r_norm).item())
    return worst
