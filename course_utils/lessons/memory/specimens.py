"""What the checks send, as plain fields both sides build from: the GPT sizes of exercise 1 and
the tensors of exercise 3. The first of each is the measured specimen of THRESHOLDS' evidence."""

from __future__ import annotations

from dataclasses import asdict

from .model import Size

SIZES = (  # exercise 1: a GPT and batch each; attention's share of the FLOPs grows with T
    Size(d_model=64, n_head=4, n_layer=2, rows=4, T=128),
    Size(d_model=32, n_head=2, n_layer=2, rows=2, T=256),
    Size(d_model=96, n_head=4, n_layer=1, rows=4, T=64),
)


def size_fields(size: Size) -> dict:
    return asdict(size)


FLOAT8_CASES = {  # exercise 3
    "the GPT's MLP activations, 3 rows 30000x the rest": {
        "gpt": {},
        "rows": 256,
        "outliers": 3,
        "outlier": 3e4,
    },
    "rows spread over 2 decades, 4 rows 1000x": {
        "rows": 64,
        "cols": 96,
        "spread": 2.0,
        "outliers": 4,
        "outlier": 1000.0,
    },
    "one feature 1000x the rest in every row": {
        "rows": 32,
        "cols": 128,
        "spread": 1.0,
        "channel": 1000.0,
    },
    "rows of negative numbers": {
        "rows": 32,
        "cols": 80,
        "spread": 1.0,
        "outliers": 2,
        "outlier": 100.0,
        "negative": True,
    },
    "a row of zeros": {"rows": 16, "cols": 64, "spread": 1.0, "zero_row": True},
}
SEEDS = (0, 1, 2, 3)
