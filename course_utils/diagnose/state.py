"""Save and put back everything a diagnosis window touches, so the learner's run is unchanged.

The window runs the learner's own step on the learner's own model (their `step(batch)` closes
over it, so a copy would not be used): before it, parameters, buffers, gradients, train/eval
modes, the optimizer's state, RNG states and the torch flags we or the step may flip are
saved; after it, all of them are put back, whatever happened in between.
"""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn


def _flags() -> dict:
    flags = {
        "cudnn.benchmark": torch.backends.cudnn.benchmark,
        "anomaly": torch.is_anomaly_enabled(),
        "anomaly_check_nan": torch.is_anomaly_check_nan_enabled(),
        "grad": torch.is_grad_enabled(),
    }
    if torch.cuda.is_available():
        flags["sync_debug"] = torch.cuda.get_sync_debug_mode()
    return flags


def _set_flags(flags: dict) -> None:
    torch.backends.cudnn.benchmark = flags["cudnn.benchmark"]
    torch.autograd.set_detect_anomaly(flags["anomaly"], flags["anomaly_check_nan"])
    torch.set_grad_enabled(flags["grad"])
    if "sync_debug" in flags:
        torch.cuda.set_sync_debug_mode(flags["sync_debug"])


@dataclass
class SavedState:
    """A snapshot of a model, its optimizer, extra stateful objects (schedulers, GradScalers)
    and the global RNG and flag state; `restore()` puts all of it back."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    extras: tuple = ()
    _saved: dict = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        flags = _flags()  # before no_grad below, which would be saved as the learner's mode
        with torch.no_grad():
            params = list(self.model.parameters())
            self._saved = {
                "model": {k: v.detach().clone() for k, v in self.model.state_dict().items()},
                "modes": [m.training for m in self.model.modules()],
                "grads": [None if p.grad is None else p.grad.detach().clone() for p in params],
                "optimizer": copy.deepcopy(self.optimizer.state_dict()),
                "extras": [copy.deepcopy(x.state_dict()) for x in self.extras],
                "rng": self._rng(),
                "flags": flags,
            }

    @staticmethod
    def _rng() -> dict:
        rng = {"torch": torch.get_rng_state(), "random": random.getstate()}
        rng["numpy"] = np.random.get_state()
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            rng["cuda"] = torch.cuda.get_rng_state_all()
        return rng

    def restore(self) -> None:
        s = self._saved
        _set_flags(s["flags"])
        with torch.no_grad():
            self.model.load_state_dict(s["model"])
            for module, training in zip(self.model.modules(), s["modes"], strict=True):
                module.training = training
            for p, g in zip(self.model.parameters(), s["grads"], strict=True):
                p.grad = None if g is None else g.clone()
        self.optimizer.load_state_dict(s["optimizer"])
        for obj, state in zip(self.extras, s["extras"], strict=True):
            obj.load_state_dict(state)
        torch.set_rng_state(s["rng"]["torch"])
        random.setstate(s["rng"]["random"])
        np.random.set_state(s["rng"]["numpy"])
        if "cuda" in s["rng"]:
            torch.cuda.set_rng_state_all(s["rng"]["cuda"])
