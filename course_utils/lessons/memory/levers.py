"""The memory levers on the GPT of model.py, and their two instruments, exact on any device.

- `held_bytes(fn)`: the bytes of the tensors `fn()` creates and still holds when it returns,
  its result aside: after a forward, what is kept for backward. Saved-tensor hooks cannot count
  it under selective checkpointing, which keeps the outputs it saves in its own cache.
- `Recomputed`: the FLOPs a backward runs, by torch's own formulas (torch.utils.flop_counter);
  a checkpointed backward's surplus over a plain one is what it recomputes. FlopCounterMode
  itself cannot run there (its dispatch changes the operator sequence that selective
  checkpointing replays and checks), so a plain TorchDispatchMode applies the same formulas.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves, tree_map
from torch.utils.checkpoint import checkpoint, create_selective_checkpoint_contexts
from torch.utils.flop_counter import flop_registry, sdpa_backward_flop_count, sdpa_flop_count

from .model import Size, batch, build, loss_of

CHECKPOINTING = ("none", "selective", "full")
# SDPA's CPU kernels, counted with torch's formulas for its CUDA flash kernels (same maths)
CPU_ATTENTION = {
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu: lambda q, k, v, *_: sdpa_flop_count(
        q, k, v
    ),
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward: (
        lambda grad, q, k, v: sdpa_backward_flop_count(grad, q, k, v)
    ),
}


def _storages(tree) -> list[torch.UntypedStorage]:
    return [t.untyped_storage() for t in tree_leaves(tree) if isinstance(t, torch.Tensor)]


def held_bytes(fn: Callable[[], object]) -> tuple[object, int]:
    """(fn(), bytes of the storages its operators created that are alive after it returned,
    the result's own left out). Views and in-place results add nothing."""
    created: dict[int, tuple[StorageWeakRef, int]] = {}

    class Track(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            inputs = {s.data_ptr() for s in _storages((args, kwargs))}
            for storage in _storages(out):
                key = storage.data_ptr()
                known = created.get(key)
                fresh = known is None or known[0].expired()  # an address freed and reused
                if key not in inputs and fresh and storage.nbytes() > 0:
                    created[key] = (StorageWeakRef(storage), storage.nbytes())
            return out

    with Track():
        result = fn()
    own = {s.data_ptr() for s in _storages(result)}
    alive = sum(n for key, (ref, n) in created.items() if not ref.expired() and key not in own)
    return result, alive


class Recomputed(TorchDispatchMode):
    """Counts the FLOPs of the operators run while active (matmuls and attention: the
    operators torch.utils.flop_counter has a formula for), without changing them."""

    def __init__(self):
        super().__init__()
        self.flops = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        shape = functools.partial(tree_map, lambda t: t.shape if isinstance(t, torch.Tensor) else t)
        if func._overloadpacket in CPU_ATTENTION:  # the CPU's flash kernels: no formula in torch
            self.flops += CPU_ATTENTION[func._overloadpacket](*shape(args)[:4])
        elif func._overloadpacket in flop_registry:
            formula = flop_registry[func._overloadpacket]
            self.flops += formula(*shape(args), **shape(kwargs or {}), out_val=shape(out))
        return out


def wrapper(checkpointing: str, context_fn: Callable | None = None):
    """How model.GPT runs each block: plain ("none"), checkpointed whole ("full"), or
    checkpointed with a policy's contexts ("selective", `context_fn` from `policy_contexts`)."""
    if checkpointing == "none":
        return None
    if checkpointing == "full":
        return lambda block, x: checkpoint(block, x, use_reentrant=False)
    return lambda block, x: checkpoint(block, x, use_reentrant=False, context_fn=context_fn)


def policy_contexts(policy) -> Callable:
    """The context_fn that selective checkpointing takes, for a policy(ctx, op, ...)."""
    return functools.partial(create_selective_checkpoint_contexts, policy)


def step_levers(size: Size, wrap, seed: int = 0, offload: bool = False) -> dict:
    """One forward and backward of the GPT with blocks run by `wrap`: the bytes held after the
    forward, the backward's FLOPs, the loss and the gradients (float64, by parameter name)."""
    model = build(size, seed)
    tokens, targets = batch(size, seed)
    forward = functools.partial(loss_of, model, tokens, targets, wrap)
    if offload:
        with torch.autograd.graph.save_on_cpu(pin_memory=torch.cuda.is_available()):
            loss, held = held_bytes(forward)
    else:
        loss, held = held_bytes(forward)
    counter = Recomputed()
    with counter:
        loss.backward()
    grads = {n: p.grad.double().clone() for n, p in model.named_parameters()}
    return {"held": held, "backward_flops": counter.flops, "loss": loss.item(), "grads": grads}


@functools.cache
def baseline(size: Size, seed: int = 0) -> dict:
    """No checkpointing and full checkpointing on `size`: the two ends a policy sits between
    (held bytes, recomputed FLOPs, and the plain step's gradients)."""
    plain, full = step_levers(size, None, seed), step_levers(size, wrapper("full"), seed)
    return {
        "none": {"held": plain["held"], "recomputed": 0},
        "full": {
            "held": full["held"],
            "recomputed": full["backward_flops"] - plain["backward_flops"],
        },
        "backward_flops": plain["backward_flops"],
        "grads": plain["grads"],
    }


def measure(size: Size, checkpointing: str, context_fn=None, seed: int = 0) -> dict:
    """Held bytes and recomputed FLOPs of one plan (`context_fn`: selective checkpointing's),
    and its gradients' largest difference from the plain step's."""
    base = baseline(size, seed)
    got = step_levers(size, wrapper(checkpointing, context_fn), seed)
    diff = max((got["grads"][n] - g).abs().max().item() for n, g in base["grads"].items())
    return {
        "held": got["held"],
        "recomputed": got["backward_flops"] - base["backward_flops"],
        "grad_diff": diff,
    }
