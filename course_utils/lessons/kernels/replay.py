"""The checks' replays, in plain torch: what a kernel with one known mistake returns on the
same inputs. A message names a cause only when the learner's output matches its replay."""

from __future__ import annotations

import torch


def padded_softmax(x: torch.Tensor) -> torch.Tensor:
    """A row softmax whose lanes past the row's end (up to the next power of two) are loaded
    as 0.0: they take part in the max and the sum."""
    cols = x.shape[1]
    block = 1 << (cols - 1).bit_length()
    padded = torch.nn.functional.pad(x.double(), (0, block - cols), value=0.0)
    num = torch.exp(padded - padded.max(dim=1, keepdim=True).values)
    return (num / num.sum(dim=1, keepdim=True))[:, :cols].float()


def packed_rows_softmax(x: torch.Tensor) -> torch.Tensor:
    """A row softmax that reads row i at i * (row length) in x's storage: right for a
    contiguous x, other numbers for a slice of a wider tensor (its stride(0) is longer)."""
    rows, cols = x.shape
    misread = torch.as_strided(x, (rows, cols), (cols, 1), x.storage_offset())
    return torch.softmax(misread.double(), dim=1).float()


def unshifted_softmax(x: torch.Tensor) -> torch.Tensor:
    """A row softmax without the max subtracted: exp overflows to inf for entries above ~88."""
    num = torch.exp(x.float())
    return num / num.sum(dim=1, keepdim=True)


def tiled_attention(q, k, v, block_n: int, *, rescale_acc=True, rescale_sum=True, scaled=True,
                    causal=True):  # fmt: skip
    """Causal attention by online softmax over tiles of `block_n` keys, as a flash forward runs
    it (in float64): with `rescale_acc` or `rescale_sum` False, that running quantity is not
    multiplied by exp(m_old - m_new) when a tile raises a query's max; `scaled` False: scores
    not multiplied by 1/sqrt(D); `causal` False: no mask."""
    q, k, v = (t.double() for t in (q, k, v))
    B, H, T, D = q.shape
    rows = torch.arange(T)[:, None]
    m = torch.full((B, H, T, 1), float("-inf"), dtype=torch.float64)
    total = torch.zeros(B, H, T, 1, dtype=torch.float64)
    acc = torch.zeros(B, H, T, D, dtype=torch.float64)
    for start in range(0, T, block_n):
        cols = torch.arange(start, min(start + block_n, T))[None, :]
        s = q @ k[..., start : start + block_n, :].transpose(-2, -1) * (D**-0.5 if scaled else 1)
        if causal:
            s = s.masked_fill(cols > rows, float("-inf"))
        m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
        alpha = torch.exp(m - m_new)
        p = torch.exp(s - m_new)
        total = (total * alpha if rescale_sum else total) + p.sum(dim=-1, keepdim=True)
        acc = (acc * alpha if rescale_acc else acc) + p @ v[..., start : start + block_n, :]
        m = m_new
    return (acc / total).float()


def attention_over(q, k, v, keep: torch.Tensor) -> torch.Tensor:
    """Attention of each query over the keys `keep` (T, T) allows, in float64: what any kernel
    that visits exactly those keys returns, however it tiles them. A query with none is 0/0."""
    q, k, v = (t.double() for t in (q, k, v))
    s = (q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5).masked_fill(~keep, float("-inf"))
    p = torch.exp(s - s.amax(dim=-1, keepdim=True))
    return (p @ v / p.sum(dim=-1, keepdim=True)).float()


def key_loops(T: int, tiles: tuple[int, ...]) -> dict[str, torch.Tensor]:
    """The keys a causal kernel visits when its mask or its key loop stops at the wrong place
    (the comparison, or the loop's end with tiles of block_m queries and block_n keys)."""
    rows, cols = torch.arange(T)[:, None], torch.arange(T)[None, :]
    loops = {
        "each query misses its own key: the causal mask keeps keys up to and including the "
        "query's own (cols <= rows), and yours drops the diagonal": cols < rows,
    }
    for m in tiles:
        start = rows // m * m
        keep = (cols <= rows) & (cols < start)
        if any(torch.equal(keep, seen) for seen in loops.values()):
            continue
        loops[
            f"the key loop stops before the query tile's own keys (with tiles of {m} queries): "
            "the first tile's queries see no key at all; loop up to the tile's last query"
        ] = keep
        for n in tiles:
            end = (start + n) // n * n  # range(0, start_m + 1, BLOCK_N) visits tiles up to here
            keep = (cols <= rows) & (cols < end)
            if torch.equal(keep, cols <= rows) or any(
                torch.equal(keep, seen) for seen in loops.values()
            ):
                continue  # every key (no mistake), or the same keys as smaller tiles: named once
            loops[
                f"the key loop stops after the tile holding the query tile's FIRST query (tiles "
                f"of {m} queries x {n} keys): later queries of a tile miss keys they may see; "
                "loop up to the tile's last query"
            ] = keep
    return loops
