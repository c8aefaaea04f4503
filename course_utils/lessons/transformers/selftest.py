"""What `course selftest` runs for notebook 12: each check with its reference answer, and the
headline effects as the notebook measures them (packing against padding; SDPA's memory)."""

from __future__ import annotations

from ...effects import effect
from . import reference as ref
from .demo import attention_memory, packing_comparison
from .packing import ROW_LEN, ROWS
from .text import documents


def answers() -> dict:
    """check id -> the arguments its locked cell passes, as the reference answers."""
    return {
        "12-sdpa-attention": lambda: (ref.reference_attention,),
        "12-packing": lambda: (ref.reference_make_batches,),
        "12-graph-break": lambda: (ref.ReferenceBlock,),
    }


def packing_effect():
    docs = documents(ROW_LEN, limit=64)
    comparison = packing_comparison(
        docs, ref.reference_make_batches, rows=ROWS, row_len=ROW_LEN, repeats=4
    )
    return effect(
        "packing documents into rows (vs padding to the longest)",
        comparison,
        metric="time per real token",
        show=False,
    )


def memory_effect():
    T = 512
    by_hand, sdpa, _ = attention_memory([T], ref.reference_attention)[T]
    return effect(
        "SDPA (vs attention by hand)",
        metric=f"attention memory at T={T}",
        baseline=by_hand,
        improved=sdpa,
        unit="bytes",
        show=False,
    )


def effects() -> dict:
    return {"packing": packing_effect, "SDPA memory": memory_effect}
