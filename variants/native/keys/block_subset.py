"""A query block's own keys and a key subset every row shares, scored as one tile through oneDNN: fixed's pattern.

Fixed (the Sparse Transformer's) gives block t's l rows their own block's l keys and the s summary keys of the
others: every pair of the (l, l + s) tile is needed, so the tile is two 2-D oneDNN products (variants.native.core
.onednn) and a softmax in place, with none of the scores thrown away. Its keys, [own block | subset], lie in one
(l + s, d) buffer per head whose subset part is gathered once; the own block's summaries, which the block counts
already, are masked in the subset's columns.

Against the union of the band of reach 0 and the subset through the fused kernel, it is faster from blocks of
MIN_BLOCK rows on, and more so as the blocks grow (docs/performance.md, "Figures behind the code's choices"). Tiles of
fewer than MIN_BLOCK rows pay more per call than the products save, and stay in the union.
"""

from __future__ import annotations

import torch

from variants.native.core import NEG_INF, onednn, step_elements

MIN_BLOCK = 128  # rows of a block from which its tile goes through oneDNN (smaller blocks ran slower so)


def applies(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block: int, subset: int, causal: bool) -> bool:
    """Whether `block_and_subset` runs this call: bidirectional, the output alone (none of q, k, v recorded),
    float32 on the CPU, blocks of at least MIN_BLOCK rows whose (block, block + subset) scores fit a step."""
    fits = block * (block + subset) <= step_elements(q)
    return not causal and block >= MIN_BLOCK and fits and onednn.onednn(q, k) and onednn.onednn(k, v)


def block_and_subset(q, k, v, *, block: int, keys: torch.Tensor) -> torch.Tensor:
    """Softmax attention of each block of `block` rows over its own block's keys and the sorted subset `keys`
    (s,) outside it: (B, H, n, d), the output alone. The subset's keys inside a block are its own block's."""
    b, h, n, d = q.shape
    s, scale = keys.numel(), d**-0.5
    q3, k3, v3 = (x.reshape(b * h, n, d) for x in (q, k, v))
    out = torch.empty_like(q3)
    kc, vc = q3.new_empty(block + s, d), q3.new_empty(block + s, d)  # [own block | subset], keys scaled
    inside = torch.searchsorted(keys, torch.arange(0, n + block, block, device=keys.device)).tolist()
    for hd in range(b * h):
        torch.index_select(k3[hd], 0, keys, out=kc[block:]).mul_(scale)
        torch.index_select(v3[hd], 0, keys, out=vc[block:])
        for t, r0 in enumerate(range(0, n, block)):
            m = min(n, r0 + block) - r0  # the last block may be short: its keys start later in the buffer
            kt, vt = kc[block - m :], vc[block - m :]
            torch.mul(k3[hd, r0 : r0 + m], scale, out=kt[:m])
            vt[:m] = v3[hd, r0 : r0 + m]
            scores = onednn.linear(q3[hd, r0 : r0 + m], kt)  # (m, m + s)
            scores[:, m + inside[t] : m + inside[t + 1]] = NEG_INF  # the block's own summaries: counted in it
            torch.softmax(scores, dim=-1, out=scores)
            out[hd, r0 : r0 + m] = onednn.linear(scores, vt.T, strided=True)  # vᵀ, a view: read in place
            del scores
    return out.view(b, h, n, d)
