"""Grouped key/value heads (MQA, GQA): the H/G query heads of a group folded into rows, one matmul per
group, K and V never repeated."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from variants.native.core import NEG_INF, KeySet, Partial, output, softmax_part, step_elements, tile_grads


def grouped(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    """Fold the H/G query heads of a group into rows: one matmul per group, K/V never repeated
    (`GroupedKeys`; under autograd with its own backward, variants.native.core.part_grad)."""
    return output(q, k, v, GroupedKeys(causal))


@dataclass(frozen=True)
class GroupedKeys(KeySet):
    """Every key of the query head's group (j <= i + n_k − n_q when causal). Query positions go in
    chunks whose scores hold at most `step_elements` (half the output: about d/2 positions of every
    head against all keys), so no n×n scores are held; a causal chunk scores only the keys its last
    row can see."""

    causal: bool

    def steps(self, q, k, v, need_lse: bool, into: Partial | None) -> Partial:
        if into is not None:
            raise NotImplementedError("GroupedKeys is a whole pattern: it folds into no other set")
        b, h, n_q, d = q.shape
        out = torch.empty_like(q)
        lse = q.new_empty(b, h, n_q) if need_lse else None
        for at, keys, rows, scores in self._tiles(q, k, tensors=1):
            o, l = softmax_part(scores, lambda p: p @ v[:, :, :keys], need_lse)  # (B, G, r·c, d), (B, G, r·c)
            at(out)[...] = o.view(at(out).shape)
            if need_lse:
                at(lse)[...] = l.view(at(lse).shape)
            del scores, rows, o, l  # before the next step's (see step_elements)
        return Partial(out, lse)

    def grads(self, q, k, v, lse, dout, shift, dq, dk, dv) -> None:
        for at, keys, rows, scores in self._tiles(q, k, tensors=2):  # P and dS
            flat = lambda x: at(x).flatten(2, 3)  # noqa: E731  (B, G, r·c, …)
            gq, gk, gv = tile_grads(scores, rows, k[:, :, :keys], v[:, :, :keys], flat(lse), flat(dout), flat(shift),
                                    q.shape[-1] ** -0.5)
            at(dq).add_(gq.view(at(dq).shape))
            dk[:, :, :keys] += gk
            dv[:, :, :keys] += gv
            del rows, scores, gq, gk, gv

    def _tiles(self, q, k, tensors: int):
        """(at: the chunk's (B, G, r, c, …) view of a (B, H, n, …) tensor, keys seen, rows (B, G, r·c, d),
        scores (B, G, r·c, keys) masked at −inf)."""
        b, h, n_q, d = q.shape
        g, n_k = k.shape[1], k.shape[2]
        r = h // g  # query heads per group: h = group·r + j
        # NB: a whole step held 2.0-2.25 outputs at n = 256-4096 while the last chunk's scores outlived it;
        # dropped before the next (del), 1.52-1.75 (measured)
        chunk = max(1, min(n_q, step_elements(q) // (tensors * b * h * n_k)))
        for s0 in range(0, n_q, chunk):
            s1 = min(s0 + chunk, n_q)
            keys = n_k - n_q + s1 if self.causal else n_k  # the keys any row of the chunk sees
            at = lambda x, s0=s0, s1=s1: x.view(b, g, r, n_q, *x.shape[3:])[:, :, :, s0:s1]  # noqa: E731
            rows = at(q).reshape(b, g, r * (s1 - s0), d)
            scores = (rows @ k[:, :, :keys].transpose(-1, -2)).mul_(d**-0.5)  # (B, G, r·c, keys)
            if self.causal:
                i = torch.arange(s0, s1, device=q.device)[:, None] + (n_k - n_q)
                scores.view(b, g, r, s1 - s0, keys).masked_fill_(torch.arange(keys, device=q.device) > i, NEG_INF)
            yield at, keys, rows, scores
            del rows, scores  # NB: the generator's names would keep this step alive beside the next
