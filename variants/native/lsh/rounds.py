"""LSH attention by rounds: sort, chunk, attend within a chunk and the one before. Its readable form
(every round whole) and the native one (a step at a time, with its own backward)."""

from __future__ import annotations

import torch

from variants.native.lsh.hashing import hashes, merge_rounds, sort_order
from variants.native.lsh.steps import SELF_SCORE, Rounds, rounds_forward, with_previous


def chunked(x: torch.Tensor, order: torch.Tensor, chunk: int) -> torch.Tensor:
    """Rows of x (B, H, n, d) in sorted order, padded to whole chunks: (B, H, C, chunk, d)."""
    b, h, n, d = x.shape
    padded = -(-n // chunk) * chunk
    rows = x.gather(2, order[..., None].expand(b, h, n, d))
    rows = torch.nn.functional.pad(rows, (0, 0, 0, padded - n))
    return rows.view(b, h, padded // chunk, chunk, d)


def one_round(q, keys, v, order, chunk: int, causal: bool):
    """Out and log-sum-exp of one round, in the original order: (B, H, n, d), (B, H, n)."""
    b, h, n, d = q.shape
    padded = -(-n // chunk) * chunk
    pos = torch.nn.functional.pad(order, (0, padded - n), value=-1).view(b, h, -1, chunk)  # (B, H, C, c)
    kpos = with_previous(pos)  # (B, H, C, 2c): -1 marks padding
    sq = chunked(q, order, chunk)
    s = sq @ with_previous(chunked(keys, order, chunk)).transpose(-1, -2) * d**-0.5  # (B, H, C, c, 2c)
    hidden = kpos[..., None, :] < 0
    if causal:
        hidden = hidden | (kpos[..., None, :] > pos[..., :, None])
    s = s.masked_fill(hidden, float("-inf")).masked_fill(kpos[..., None, :] == pos[..., :, None], SELF_SCORE)
    lse = torch.logsumexp(s, dim=-1)  # (B, H, C, c); padded query rows are dropped below
    out = torch.softmax(s, dim=-1) @ with_previous(chunked(v, order, chunk))  # (B, H, C, c, d)
    undo = torch.argsort(order, dim=-1)  # (B, H, n)
    out = out.view(b, h, padded, d)[:, :, :n].gather(2, undo[..., None].expand(b, h, n, d))
    return out, lse.view(b, h, padded)[:, :, :n].gather(2, undo)


def readable(q, k, v, causal: bool, params: dict, rot) -> torch.Tensor:
    """The native algorithm's readable form: every round whole, with sorted copies, merged at the
    end (O(rounds·n·c) memory; autograd through it held 57 outputs at n = 1024)."""
    order = sort_order(hashes(q, rot))
    keys = torch.nn.functional.normalize(q, dim=-1)
    rounds = [one_round(q, keys, v, order[:, :, r], params["chunk"], causal) for r in range(order.shape[2])]
    return merge_rounds(torch.stack([o for o, _ in rounds], 2), torch.stack([s for _, s in rounds], 2))


def native(q, k, v, causal: bool, params: dict, rot) -> torch.Tensor:
    """Sort, chunk, attend to two chunks: O(rounds·(n log n + n·2c·d)) time and O(n·c) memory, a
    step at a time (variants.native.lsh.steps); under autograd with its own backward, in a few outputs."""
    order = sort_order(hashes(q, rot))
    if torch.is_grad_enabled() and (q.requires_grad or v.requires_grad):
        return Rounds.apply(q, v, order, params["chunk"], causal)
    return rounds_forward(q, v, order, params["chunk"], causal)[0]
