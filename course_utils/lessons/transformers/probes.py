"""Lesson 12's probes: each runs the learner's answer on a specimen it builds from plain
arguments, beside the learner's code, and returns what it saw as data (course_utils.probes).
The checks (checks.py, pack_check.py, break_check.py) decide: they build the same specimens,
compute what the answer must equal themselves, and compare."""

from __future__ import annotations

import torch
from torch.overrides import TorchFunctionMode

from ...guards import _as_learner
from ...memory import tensor_peak_bytes
from ...probes import probe, raised
from .attention import qkv, random_docs
from .compiling import BLOCK_CONFIG, block_input, graphs_of
from .packing import check_docs, other_docs
from .reference import ReferenceBlock

MEMORY_DOCS = 5  # documents per row of the memory probe's doc_ids


# --- specimens, built alike on both sides -------------------------------------------------------


def attention_inputs(shape, seed: int, n_docs: int | None = None):
    """(q, k, v, doc_ids) of a (B, H, T, D, documents per row) specimen drawn with `seed`;
    doc_ids None without documents. `n_docs` overrides the shape's count."""
    B, H, T, D, docs = shape
    docs = docs if n_docs is None else n_docs
    q, k, v = qkv(B, H, T, D, seed=seed)
    return q, k, v, random_docs(B, T, docs, seed=seed) if docs else None


def output_gradient(shape, seed: int) -> torch.Tensor:
    """The gradient of the loss with respect to an output of `shape`, drawn with `seed`."""
    return torch.randn(tuple(shape), generator=torch.Generator().manual_seed(seed))


def _tensor_or_type(value) -> dict:
    """An answer's output as data: a copy of the tensor as it is now (a later call may write
    into the same one), or only its type's name."""
    if isinstance(value, torch.Tensor):
        return {
            "type": "Tensor",
            "out": value.detach().clone(),
            "requires_grad": value.requires_grad,
        }
    return {"type": type(value).__name__, "out": None, "requires_grad": False}


# --- 12-sdpa-attention ---------------------------------------------------------------------------


@probe
def attention_output(causal_attention, shape: list, seed: int, grad_seed: int) -> dict:
    """The learner's attention on one specimen, its q, k and v requiring grad: the output (or
    its type), whether it requires grad and, when it does and has the output's shape, the
    gradients of q, k and v for the output gradient drawn with `grad_seed` (or what the
    backward raised: the check asks for them only once the output is right)."""
    q, k, v, doc_ids = attention_inputs(shape, seed)
    q, k, v = (t.requires_grad_() for t in (q, k, v))
    got = causal_attention(q, k, v, doc_ids)
    seen = {**_tensor_or_type(got), "grads": None, "grad_raised": None}
    if seen["requires_grad"] and tuple(got.shape) == tuple(shape[:4]):
        try:
            g = output_gradient(got.shape, grad_seed).to(got.device)
            seen["grads"] = list(torch.autograd.grad(got, (q, k, v), g))
        except Exception as exc:  # the learner's backward
            seen["grad_raised"] = raised(exc)
    return seen


@probe
def attention_again(causal_attention, shape: list, seed: int):
    """The learner's attention once more on the same specimen, inputs detached: the output of
    a deterministic answer equals the first call's."""
    return causal_attention(*attention_inputs(shape, seed))


@probe
def attention_peak(causal_attention, shape: list, seed: int, with_docs: bool) -> dict:
    """Peak bytes of the tensors the learner's attention allocates on one specimen
    (cu.tensor_peak_bytes, a dispatch mode around the call), and its output, so the check can
    see that the work measured was the attention's."""
    q, k, v, doc_ids = attention_inputs(shape, seed, MEMORY_DOCS if with_docs else 0)
    out: list = []
    with _SdpaMasks() as masks:
        peak = tensor_peak_bytes(lambda: out.append(causal_attention(q, k, v, doc_ids)))
    return {"peak": peak, "masks": masks.shapes, **_tensor_or_type(out[0])}


class _SdpaMasks(TorchFunctionMode):
    """The shape of each attn_mask handed to scaled_dot_product_attention (a mask copied per
    head holds H times the bytes of one that broadcasts)."""

    def __init__(self) -> None:
        super().__init__()
        self.shapes: list[list[int]] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.nn.functional.scaled_dot_product_attention:
            mask = kwargs.get("attn_mask", args[3] if len(args) > 3 else None)
            if isinstance(mask, torch.Tensor):
                self.shapes.append(list(mask.shape))
        return func(*args, **kwargs)


# --- 12-packing ----------------------------------------------------------------------------------

BATCH_FIELDS = ("tokens", "targets", "positions", "doc_ids")


@probe
def batches_made(make_batches, rows: int, row_len: int, short_only: bool) -> list[dict]:
    """The learner's batches for the check's documents (`short_only`: those that fit
    `row_len`), each as its four fields' tensors (None where a field is None)."""
    docs = other_docs(row_len) if short_only else check_docs()
    batches = list(make_batches([d.clone() for d in docs], rows, row_len))
    out = []
    for batch in batches:
        fields = {}
        for name in BATCH_FIELDS:
            value = getattr(batch, name, None)
            fields[name] = value if value is None else torch.as_tensor(value)
        out.append(fields)
    return out


# --- 12-graph-break ------------------------------------------------------------------------------


def _kept(block) -> dict:
    """What the block's `last_rms` holds now, as data: its type's name ("NoneType" where there
    is none), the value where it is a tensor (a copy: a buffer written in place by the next
    call changes) or a number, a tensor's shape, whether it requires grad, and whether it
    holds an autograd graph (a grad_fn: the step's activations stay alive with it)."""
    kept = getattr(block, "last_rms", None)
    tensor = isinstance(kept, torch.Tensor)
    value = kept.detach().clone() if tensor else kept if isinstance(kept, int | float) else None
    return {
        "type": type(kept).__name__,
        "value": value,
        "shape": list(kept.shape) if tensor else None,
        "requires_grad": tensor and kept.requires_grad,
        "graph": tensor and kept.grad_fn is not None,
    }


@probe
def block_readings(
    block_cls,
    weights: dict,
    x_spec: list,
    doc_seed: int,
    n_docs: int,
    compiled_spec: list,
    grad_seed: int,
) -> dict:
    """The learner's block, given the colleague's `weights`, where the training loop and the
    dashboard look: its output on block_input(*x_spec) without and with doc_ids, `last_rms`
    after each, the parameter gradients (by name) for the output with doc_ids and the output
    gradient drawn with `grad_seed`, then TorchDynamo's explain on another input
    (block_input(*compiled_spec)), which runs the compiled forward once, and `last_rms` after
    it. Each call of the block runs as the learner's code."""

    def plain(fn, *args):
        return fn(*args)

    run = plain if block_cls is ReferenceBlock else _as_learner(plain)
    mine = block_cls(BLOCK_CONFIG)
    mine.load_state_dict(weights)
    B, T, seed = x_spec
    x = block_input(B, T, seed=seed)
    seen = {"plain": _tensor_or_type(run(mine, x)), "stat": _kept(mine)}
    got = run(mine, x, random_docs(B, T, n_docs, seed=doc_seed))
    seen["docs"], seen["grads"], seen["grad_raised"] = _tensor_or_type(got), None, None
    if seen["docs"]["requires_grad"]:
        try:
            names, params = zip(*mine.named_parameters(), strict=True)
            g = output_gradient(got.shape, grad_seed).to(got.device)
            grads = torch.autograd.grad(got, params, g, allow_unused=True)
            seen["grads"] = dict(zip(names, grads, strict=True))
        except Exception as exc:  # the learner's backward
            seen["grad_raised"] = raised(exc)
    seen["before"] = _kept(mine)
    B2, T2, seed2 = compiled_spec
    graphs = run(graphs_of, mine, block_input(B2, T2, seed=seed2))
    seen["graphs"] = {
        "graphs": graphs.graphs,
        "breaks": graphs.breaks,
        "ops": graphs.ops,
        "reasons": list(graphs.reasons),
    }
    seen["after"] = _kept(mine)
    return seen
