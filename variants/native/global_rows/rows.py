"""Key sets of global tokens (Longformer's and BigBird's): the first g rows attend to every key, the
other rows to what the rest of their pattern gives them."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from variants.native.core import (
    NEG_INF,
    KeySet,
    Partial,
    fold,
    fused,
    fused_attention,
    softmax_part,
    step_elements,
    tile_grads,
)


@dataclass(frozen=True)
class GlobalRows(KeySet):
    """Rows i < g attend to every key (j <= i when causal), in place of what `rest` gives them;
    rows i >= g are `rest`'s (bigbird's and Longformer's global tokens). The full rows go through
    `full_rows` for the output alone, through the fused CPU kernel with their lse, or else in chunks
    of keys, folded."""

    rest: KeySet
    g: int
    causal: bool

    def steps(self, q, k, v, need_lse: bool, into: Partial | None) -> Partial:
        res = self.rest.steps(q, k, v, need_lse, into)
        if not need_lse:
            res.out[:, :, : self.g] = full_rows(q, k, v, rows=self.g, causal=self.causal)
            return res
        out, lse = res.out[:, :, : self.g], res.lse[:, :, : self.g]
        if self.g and not self.causal and fused(q):  # SDPA's CPU kernel, with its lse: tiles of keys, in place
            o, l = fused_attention(q[:, :, : self.g], k, v, None, q.shape[-1] ** -0.5)
            out.copy_(o)
            lse.copy_(l)
            return res
        out.zero_()
        lse.fill_(NEG_INF)
        for keys, scores in self._tiles(q, k):
            o, l = softmax_part(scores, lambda p: p @ v[:, :, keys], need_lse=True)
            fold(out, lse, o, l)
            del scores, o, l  # before the next step's (see step_elements)
        return res

    def grads(self, q, k, v, lse, dout, shift, dq, dk, dv) -> None:
        rest_lse = lse.clone()
        rest_lse[:, :, : self.g] = float("inf")  # P = 0: rows i < g take none of rest's keys
        self.rest.grads(q, k, v, rest_lse, dout, shift, dq, dk, dv)
        g, scale = self.g, q.shape[-1] ** -0.5
        for keys, scores in self._tiles(q, k):
            gq, gk, gv = tile_grads(
                scores, q[:, :, :g], k[:, :, keys], v[:, :, keys], lse[:, :, :g], dout[:, :, :g], shift[:, :, :g], scale
            )
            dq[:, :, :g] += gq
            dk[:, :, keys] += gk
            dv[:, :, keys] += gv
            del scores, gq, gk, gv

    def _tiles(self, q, k):
        """(keys, scores (B, H, g, C)) of the full rows, a chunk of keys at a time: all n keys, or
        the first g under a causal mask."""
        b, h, n, d = q.shape
        g = self.g
        width = g if self.causal else n
        chunk = max(1, step_elements(q) // (b * h * (2 * g + 2 * d)))  # scores, dP; dK, dV of the chunk
        for k0 in range(0, width, chunk):
            keys = slice(k0, min(k0 + chunk, width))
            scores = (q[:, :, :g] @ k[:, :, keys].transpose(-1, -2)).mul_(d**-0.5)
            if self.causal:
                j = torch.arange(keys.start, keys.stop, device=q.device)
                scores.masked_fill_(j[None, :] > torch.arange(g, device=q.device)[:, None], NEG_INF)
            yield keys, scores
            del scores  # NB: the generator's name would keep this step alive beside the next


def full_rows(q, k, v, *, rows: int, causal: bool) -> torch.Tensor:
    """The first `rows` queries attend to every key (global tokens): O(rows · n · d).

    Non-causal through SDPA, whose CPU kernel goes in tiles of keys (no rows × n scores held);
    causal rows i < rows see only keys j <= i < rows: a rows × rows block."""
    from variants.impls import dense_attention

    qg = q[:, :, :rows]
    if causal:
        return dense_attention(qg, k[:, :, :rows], v[:, :, :rows], causal=True)
    return F.scaled_dot_product_attention(qg, k, v)
