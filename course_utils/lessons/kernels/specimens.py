"""The inputs the checks send, built from plain fields on both sides (the probe beside the
learner's kernel, the check in the judge), so each side computes from the same tensors."""

from __future__ import annotations

import torch

# exercise 1: rows of a softmax; the first is the measured specimen of THRESHOLDS' evidence
SOFTMAX_CASES = {
    "rows of 64 (a power of two)": {"rows": 6, "cols": 64, "scale": 1.0, "shift": -3.0},
    "rows of 100": {"rows": 5, "cols": (100, 37, 200), "scale": 1.0, "shift": -3.0},
    "rows of 781, all entries negative": {
        "rows": 3,
        "cols": (781, 300, 513),
        "scale": 2.0,
        "shift": -20.0,
    },  # fmt: skip
    "entries up to 400 (exp overflows without the max)": {
        "rows": 4,
        "cols": (96, 130),
        "scale": 150.0,
        "shift": 0.0,
    },  # fmt: skip
    "rows of 37, every entry near -300": {  # lanes padded with any finite value lead them
        "rows": 3,
        "cols": (37, 45, 91),
        "scale": 5.0,
        "shift": -300.0,
    },  # fmt: skip
    "a slice of a wider tensor (row stride > length)": {
        "rows": 4,
        "cols": (50, 77),
        "scale": 1.0,
        "shift": -1.0,
        "wider": 19,
    },  # fmt: skip
}


def softmax_input(case: dict, seed: int = 0) -> torch.Tensor:
    """(rows, cols) float32 on the CPU: N(shift, scale), a view with a longer row stride where
    the case says `wider`."""
    g = torch.Generator().manual_seed(seed)
    rows, cols, wider = case["rows"], case["cols"], case.get("wider", 0)
    x = torch.randn(rows, cols + wider, generator=g) * case["scale"] + case["shift"]
    return x[:, :cols]


# exercise 2: attention whose running max grows tile after tile, or does not
FLASH_CASES = {
    "the max in the first keys": {"B": 1, "H": 2, "T": 128, "D": 16, "kind": "first"},
    "the max growing along the keys": {
        "B": 1,
        "H": 2,
        "T": (128, 96, 160),
        "D": 16,
        "kind": "growing",
    },  # fmt: skip
    "random, 100 positions": {"B": 2, "H": 1, "T": (100, 75, 130), "D": (32, 16), "kind": "random"},
    "heads interleaved in memory (q.transpose(1, 2) of (B, T, H, D))": {
        "B": 1,
        "H": 2,
        "T": (64, 80),
        "D": 16,
        "kind": "random",
        "layout": "BTHD",
    },  # fmt: skip
}


def flash_inputs(case: dict, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """q, k, v (B, H, T, D) float32 on the CPU (views of (B, T, H, D) tensors where the case's
    layout says so). "growing": each key's score rises with its
    position (a direction u in every query, a growing multiple of u in the keys), so a query's
    largest score sits in its last tile; "first": it falls, so the largest sits in the first."""
    g = torch.Generator().manual_seed(seed)
    B, H, T, D = case["B"], case["H"], case["T"], case["D"]
    if case.get("layout") == "BTHD":  # as a projection's output is laid out: not contiguous
        q, k, v = (torch.randn(B, T, H, D, generator=g).transpose(1, 2) for _ in range(3))
    else:
        q, k, v = (torch.randn(B, H, T, D, generator=g) for _ in range(3))
    if case["kind"] != "random":
        u = torch.zeros(D)
        u[0] = 1.0
        ramp = torch.linspace(0.0, 1.0, T)[:, None] * u  # (T, D)
        if case["kind"] == "first":
            ramp = ramp.flip(0)
        q = 0.3 * q + 4.0 * u
        k = 0.3 * k + 16.0 * ramp
    return q, k, v


def drawn(cases: dict, rng) -> dict[str, dict]:
    """Each case with every tuple of options drawn (the first option in a notebook)."""
    return {
        name: {key: rng.choice(v) if isinstance(v, tuple) else v for key, v in case.items()}
        for name, case in cases.items()
    }


def attention_inputs(kind: str = "random", T: int = 128, D: int = 16, seed: int = 0):
    """q, k, v (1, 2, T, D) of a kind the check sends: "first", "growing" or "random"."""
    return flash_inputs({"B": 1, "H": 2, "T": T, "D": D, "kind": kind}, seed)
