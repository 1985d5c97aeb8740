"""Grouped key/value heads (MQA, GQA): the H/G query heads of a group folded into rows, one matmul per
group, K and V never repeated."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import torch

from variants.native.core import NEG_INF, KeySet, Partial, onednn, output, softmax_part, step_elements, tile_grads
from variants.rules.paths import took

MIN_ROWS = 64  # a group's query rows (n_q · H/G) from which its products go through oneDNN
# A oneDNN chunk's scores at most SCORES_ELEMENTS, or CACHED_ROWS query positions where those are more: few keys
# (linformer's 256 projected ones) would otherwise make a whole step one chunk, slower than chunks that stay in
# cache (docs/performance.md, "(25) Tiles through oneDNN: linformer's projected keys, fixed's blocks, the linearized
# first pass"); MQA's and GQA's chunks are fewer rows.
SCORES_ELEMENTS, CACHED_ROWS = 1 << 20, 256


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
        if self._by_groups(q, k):
            took("groups onednn")
            return self._by_group(q, k, v, need_lse)
        took("batched")
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

    def _by_groups(self, q, k) -> bool:
        """Per group through oneDNN: float32 on the CPU, where a group's chunk holds enough query rows to pay
        for V's copy (a decode step of a few rows would be slower so: docs/performance.md, "(18) The grouped
        heads' products, one group at a time through oneDNN")."""
        r = q.shape[1] // k.shape[1]
        return onednn.onednn(q, k) and r * self._group_rows(q, k) >= MIN_ROWS

    def _group_rows(self, q, k) -> int:
        """Query positions of one group's forward chunk: its scores fit a step beside the group's vᵀ (and,
        causal, the copy of a chunk's first keys of it that oneDNN reads). NB: vᵀ of every group at once,
        held beside a step, left no room at H/G = 2, n = 4096: one position a chunk, 12-75x SDPA's time."""
        r, n_k, d = q.shape[1] // k.shape[1], k.shape[2], k.shape[3]
        held = d * n_k * (2 if self.causal else 1)
        rows = min(q.shape[2], max(step_elements(q) - held, 0) // (r * n_k))
        return min(rows, max(CACHED_ROWS, SCORES_ELEMENTS // (r * n_k)))

    def _by_group(self, q, k, v, need_lse: bool) -> Partial:
        """The forward as one oneDNN product per (batch, group) and chunk, each group's scores its own 2-D
        tensor (variants.native.core.onednn: MKL's batched product may run at half oneDNN's rate)."""
        b, h, n_q, d = q.shape
        g, n_k = k.shape[1], k.shape[2]
        r, chunk = h // g, self._group_rows(q, k)
        out = torch.empty_like(q)
        lse = q.new_empty(b, h, n_q) if need_lse else None
        for i, j in itertools.product(range(b), range(g)):
            heads = slice(j * r, (j + 1) * r)  # group j's query heads: h = j·r + t, t < r
            vt = v[i, j].transpose(0, 1).contiguous()  # (d, n_k): p·v is p·(vᵀ)ᵀ, oneDNN's weight layout
            for s0 in range(0, n_q, chunk):
                s1 = min(s0 + chunk, n_q)
                keys = n_k - n_q + s1 if self.causal else n_k  # the keys any row of the chunk sees
                rows = q[i, heads, s0:s1].reshape(-1, d)  # (r·c, d)
                scores = onednn.linear(rows, k[i, j, :keys]).mul_(d**-0.5)  # (r·c, keys)
                self._mask(scores.view(r, s1 - s0, keys), s0, s1, n_k - n_q)
                o, l = softmax_part(scores, lambda p: onednn.linear(p, vt[:, :keys]), need_lse)  # noqa: F821 (vt: del below)
                out[i, heads, s0:s1] = o.view(r, s1 - s0, d)
                if need_lse:
                    lse[i, heads, s0:s1] = l.view(r, s1 - s0)
                del rows, scores, o, l
            del vt  # before the next group's copy
        return Partial(out, lse)

    def grads(self, q, k, v, lse, dout, shift, dq, dk, dv) -> None:
        if self._by_groups(q, k):
            return self._grads_by_group(q, k, v, lse, dout, shift, dq, dk, dv)
        for at, keys, rows, scores in self._tiles(q, k, tensors=2):  # P and dS
            flat = lambda x: at(x).flatten(2, 3)  # noqa: E731  (B, G, r·c, …)
            gq, gk, gv = tile_grads(
                scores, rows, k[:, :, :keys], v[:, :, :keys], flat(lse), flat(dout), flat(shift), q.shape[-1] ** -0.5
            )
            at(dq).add_(gq.view(at(dq).shape))
            dk[:, :, :keys] += gk
            dv[:, :, :keys] += gv
            del rows, scores, gq, gk, gv

    def _grads_by_group(self, q, k, v, lse, dout, shift, dq, dk, dv) -> None:
        """The backward per (batch, group) and chunk: 2-D tiles, whose products go through oneDNN (tile_grads)."""
        d, n_q = q.shape[-1], q.shape[2]
        for at, keys, s0, s1, rows in self._chunks(q, k, tensors=3, groups=1):  # P, dS, and Pᵀ or dSᵀ
            for i, j in itertools.product(range(q.shape[0]), range(k.shape[1])):
                flat = lambda x: at(x)[i, j].reshape(rows.shape[2], *x.shape[3:])  # noqa: E731  (r·c, …)
                scores = onednn.linear(rows[i, j], k[i, j, :keys]).mul_(d**-0.5)
                self._mask(scores.view(-1, s1 - s0, keys), s0, s1, k.shape[2] - n_q)
                gq, gk, gv = tile_grads(
                    scores, rows[i, j], k[i, j, :keys], v[i, j, :keys], flat(lse), flat(dout), flat(shift), d**-0.5
                )
                at(dq)[i, j] += gq.view(at(dq)[i, j].shape)
                dk[i, j, :keys] += gk
                dv[i, j, :keys] += gv
                del scores, gq, gk, gv

    def _tiles(self, q, k, tensors: int):
        """(at, keys seen, rows (B, G, r·c, d), scores (B, G, r·c, keys) masked at −inf), per chunk."""
        b, g, n_q, d = q.shape[0], k.shape[1], q.shape[2], q.shape[3]
        for at, keys, s0, s1, rows in self._chunks(q, k, tensors, groups=b * g):
            scores = (rows @ k[:, :, :keys].transpose(-1, -2)).mul_(d**-0.5)  # (B, G, r·c, keys)
            self._mask(scores.view(b, g, -1, s1 - s0, keys), s0, s1, k.shape[2] - n_q)
            yield at, keys, rows, scores
            del rows, scores  # NB: the generator's names would keep this step alive beside the next

    def _chunks(self, q, k, tensors: int, groups: int):
        """(at: the chunk's (B, G, r, c, …) view of a (B, H, n, …) tensor, keys seen, s0, s1, rows (B, G, r·c, d)):
        chunks whose `tensors` score-sized buffers for `groups` groups at once fit in a step."""
        b, h, n_q, d = q.shape
        g, n_k = k.shape[1], k.shape[2]
        r = h // g  # query heads per group: h = group·r + j
        # NB: the last chunk's scores are dropped before the next chunk's (del): kept, they outlived the chunk
        # and a whole step held half an output more
        chunk = max(1, min(n_q, step_elements(q) // (tensors * groups * r * n_k)))
        for s0 in range(0, n_q, chunk):
            s1 = min(s0 + chunk, n_q)
            keys = n_k - n_q + s1 if self.causal else n_k  # the keys any row of the chunk sees
            at = lambda x, s0=s0, s1=s1: x.view(b, g, r, n_q, *x.shape[3:])[:, :, :, s0:s1]  # noqa: E731
            rows = at(q).reshape(b, g, r * (s1 - s0), d)
            yield at, keys, s0, s1, rows
            del rows

    def _mask(self, scores: torch.Tensor, s0: int, s1: int, shift: int) -> None:
        """Causal: −inf where key j lies after query i + shift, on scores (…, c, keys) of rows s0..s1."""
        if self.causal:
            keys = scores.shape[-1]
            i = torch.arange(s0, s1, device=scores.device)[:, None] + shift
            scores.masked_fill_(torch.arange(keys, device=scores.device) > i, NEG_INF)
