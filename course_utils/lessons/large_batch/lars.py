"""Tip 5's layer-wise optimisers as reference answers: LARS (You et al. 2017, arXiv:1708.03888)
on SGD with momentum, and LAMB (You et al. 2019, arXiv:1904.00962) on Adam's moments. PyTorch
has neither; timm has both, and the course does not depend on it for two short classes.

Convention (stated in notebook 02b after exercise 2's check; before it, the notebook points to
timm's Lars and LAMB's BERT recipe): tensors with more than one dimension (conv and linear
weights) are adapted; one-dimensional ones (biases, BatchNorm's weight and bias) get
neither the trust ratio nor weight decay, as in LAMB's BERT recipe and Lightning Bolts' LARS.
A layer whose weight norm or update norm is zero gets trust ratio 1 (timm's rule)."""

from __future__ import annotations

import torch

from ... import guards
from ...errors import ReferenceUsed


def adapted(p: torch.Tensor) -> bool:
    """Whether `p` gets the trust ratio and weight decay: weights, not biases or norm scales."""
    return p.ndim > 1


def trust_ratio(
    weight: torch.Tensor,
    denominator: torch.Tensor,
    coef: float = 1.0,
    update_norm: torch.Tensor | None = None,
):
    """coef * |w| / denominator, and 1 where |w| or the update's norm (the denominator unless
    given) is zero: a zero-initialised layer must still move, and a layer without gradient
    must neither divide by zero nor have its weight decay scaled by eta |w| / (wd |w| + eps)."""
    w = weight.norm()
    u = denominator if update_norm is None else update_norm
    ratio = coef * w / denominator.clamp_min(torch.finfo(w.dtype).tiny)
    return torch.where((w > 0) & (u > 0), ratio, torch.ones_like(ratio))


def layer_ratio(weight: torch.Tensor, update: torch.Tensor):
    """LAMB's layer-wise ratio |w| / |u|, and 1 where either norm is zero (timm's rule). LARS's
    ratio, with its trust coefficient and weight decay in the denominator, is exercise 2's to
    write: `trust_ratio` is withheld from the grading kernel (ANSWERS_ELSEWHERE)."""
    w, u = weight.norm(), update.norm()
    ratio = w / u.clamp_min(torch.finfo(w.dtype).tiny)
    return torch.where((w > 0) & (u > 0), ratio, torch.ones_like(ratio))


class _Reference(torch.optim.Optimizer):
    """Refuses to step inside a learner's graded code: the answer must be the learner's. A
    check runs the class it is given as the learner's code, so the reference itself, a
    learner's subclass of it, and code that steps it are all refused."""

    guarded = True

    def _refuse_inside_a_check(self) -> None:
        if self.guarded and guards._learner_depth > 0:  # named as the lesson names it
            raise ReferenceUsed(
                next(c for c in type(self).__mro__ if c.__module__ == __name__).__name__
            )


def unguarded(reference_class: type) -> type:
    """The reference with its refusal switched off: what `course selftest` gives the check,
    so that the check grades the reference's updates (given by a learner, it is refused)."""
    return type(reference_class.__name__, (reference_class,), {"guarded": False})


class ReferenceLARS(_Reference):
    """You et al. 2017, algorithm 1: d = g + wd w; local LR = eta |w| / (|g| + wd |w|);
    v = momentum v + local LR * d; w -= lr v, the LR outside the buffer as torch.optim.SGD
    has it (the paper puts it inside, which differs once a scheduler changes the LR).
    Verified by check 02b-trust-ratio (its tests)."""

    def __init__(self, params, lr, momentum=0.9, weight_decay=0.0, trust_coef=0.001, eps=1e-8):
        defaults = dict(
            lr=lr, momentum=momentum, weight_decay=weight_decay, trust_coef=trust_coef, eps=eps
        )
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure=None):
        self._refuse_inside_a_check()
        for group in self.param_groups:
            wd, eta, eps = group["weight_decay"], group["trust_coef"], group["eps"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                d, ratio = p.grad, 1.0
                if adapted(p):
                    g = p.grad.norm()
                    ratio = trust_ratio(p, g + wd * p.norm() + eps, eta, update_norm=g)
                    d = d.add(p, alpha=wd)
                buf = self.state[p].setdefault("momentum_buffer", torch.zeros_like(p))
                buf.mul_(group["momentum"]).add_(d * ratio)
                p.sub_(buf, alpha=group["lr"])


class ReferenceLAMB(_Reference):
    """You et al. 2019, algorithm 2: Adam's bias-corrected update u = m/(sqrt(v) + eps) + wd w,
    scaled per layer by |w| / |u|; w -= lr * ratio * u."""

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))

    @torch.no_grad()
    def step(self, closure=None):
        self._refuse_inside_a_check()
        for group in self.param_groups:
            (b1, b2), wd = group["betas"], group["weight_decay"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                state = self.state[p]
                if not state:
                    state.update(t=0, m=torch.zeros_like(p), v=torch.zeros_like(p))
                state["t"] += 1
                state["m"].mul_(b1).add_(p.grad, alpha=1 - b1)
                state["v"].mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
                m_hat = state["m"] / (1 - b1 ** state["t"])
                v_hat = state["v"] / (1 - b2 ** state["t"])
                u = m_hat / (v_hat.sqrt() + group["eps"])
                ratio = 1.0
                if adapted(p):
                    u = u.add(p, alpha=wd)
                    ratio = layer_ratio(p, u)
                p.sub_(u * ratio, alpha=group["lr"])
