"""Lesson 12: training a transformer fast. Attention by hand and by SDPA (attention), a byte
-level GPT (model) on Python's help texts (text), padding against packing (packing, and its
check in pack_check), torch.compile's graph breaks (compiling, and its check in
break_check), the demos (demo); answers in reference, the attention check and the
thresholds in checks."""

from .attention import (
    allowed,
    backends,
    flex_attention_docs,
    flex_support,
    kernels_run,
    naive_attention,
    probe_dtype,
    qkv,
    random_docs,
    score_bytes,
)
from .break_check import check_graph_break
from .checks import THRESHOLDS, check_attention
from .compiling import (
    ColleagueBlock,
    FirstStep,
    Graphs,
    block_input,
    block_pair,
    can_compile,
    first_vs_steady,
    graphs_of,
    normalised,
)
from .demo import (
    VARIANTS,
    attention_memory,
    lengths_summary,
    packing_comparison,
    parameters,
    peak_bytes,
    per_variant,
    plot_memory,
    precision_rounds,
    real_token_rate,
    step_comparison,
    train,
)
from .model import Block, Config, TinyGPT, build, config, loss
from .pack_check import THRESHOLDS as PACK_THRESHOLDS
from .pack_check import check_packing
from .packing import check_docs, epoch
from .reference import ReferenceBlock, reference_attention, reference_make_batches
from .text import IGNORE, Batch, documents, lm_batches, pad_batches, padded, waste

__all__ = [
    "allowed",
    "IGNORE",
    "PACK_THRESHOLDS",
    "THRESHOLDS",
    "Batch",
    "Block",
    "ColleagueBlock",
    "Config",
    "FirstStep",
    "Graphs",
    "ReferenceBlock",
    "TinyGPT",
    "attention_memory",
    "backends",
    "block_input",
    "block_pair",
    "build",
    "can_compile",
    "check_attention",
    "check_docs",
    "check_graph_break",
    "check_packing",
    "config",
    "documents",
    "epoch",
    "first_vs_steady",
    "flex_attention_docs",
    "flex_support",
    "graphs_of",
    "kernels_run",
    "lengths_summary",
    "lm_batches",
    "loss",
    "naive_attention",
    "normalised",
    "VARIANTS",
    "per_variant",
    "probe_dtype",
    "precision_rounds",
    "packing_comparison",
    "pad_batches",
    "padded",
    "parameters",
    "peak_bytes",
    "plot_memory",
    "qkv",
    "random_docs",
    "real_token_rate",
    "reference_attention",
    "reference_make_batches",
    "score_bytes",
    "step_comparison",
    "train",
    "waste",
]

# harness functions that compute an exercise's answer under another name: the grading kernel
# withholds them (course_utils.grading.kernel_harness). flex_attention_docs is exercise 1's
# attention within documents (FlexAttention, fused and compiled on a GPU); the model's own
# SDPA is written out in SelfAttention.forward, not as a function of q, k, v.
ANSWERS_ELSEWHERE = ("course_utils.lessons.transformers.attention:flex_attention_docs",)
