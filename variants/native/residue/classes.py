"""Attention within residue classes: keys j ≡ i (mod l), j ≠ i (the Sparse Transformer's strided part).
Positions m·l + r are viewed as (class r, member m), so each class is a small dense attention."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from variants.native.core import (
    NEG_INF,
    KeySet,
    Partial,
    additive,
    cache_elements,
    cache_sized,
    empty_rows,
    fold,
    fused,
    fused_attention,
    grad_of,
    softmax_part,
    step_elements,
    tile_grads,
)


@dataclass(frozen=True)
class Residues(KeySet):
    """Keys j with (i - j) mod l == 0 and j != i, as attention within each residue class.

    Positions p = m·l + r go to (r, m): l classes of about n/l rows each, so the work is
    l · (n/l)² · d = n²/l · d, i.e. O(n^1.5 · d) for l ∝ √n. Where l does not divide n, the first
    `rem` classes have one member more than the others: two sections, each a strided view, so no
    reordered or padded copy of the input or output is made. Per head, a group of classes is a
    batch of matrices with row stride l·d that bmm reads in place, and its results are written (or
    folded) straight back to positions m·l + r; the backward goes by the same groups.
    """

    stride: int
    causal: bool
    budget: int = 1 << 17  # scores of a group of classes (in cache)

    def steps(self, q, k, v, need_lse: bool, into: Partial | None) -> Partial:
        b, h, n, d = q.shape
        folding = into is not None
        out = into.out if folding else q.new_empty(b, h, n, d)
        lse = into.lse if folding else (q.new_empty(b, h, n) if need_lse else None)
        for r0, r1, count in _sections(n, self.stride):
            if fused(q) and not grad_of(q, k, v):
                _by_group(q, k, v, out, lse, folding, r0, r1, count, self.stride, self.causal)
            else:
                _by_head(q, k, v, out, lse, folding, r0, r1, count, self.stride, self.causal, self.budget)
        return into if folding else Partial(out, lse)

    def grads(self, q, k, v, lse, dout, shift, dq, dk, dv) -> None:
        d = q.shape[-1]
        for r0, r1, count in _sections(q.shape[2], self.stride):
            masked = _diagonal(count, self.causal, q.device)
            views = [_classes(x, self.stride, r0, r1, count) for x in (q, k, v, lse, dout, shift, dq, dk, dv)]
            group = _group(q, count, cache_elements(q, self.budget), tensors=2)
            for i in range(views[0].shape[0]):
                for g0 in range(0, r1 - r0, group):
                    cls = slice(g0, min(g0 + group, r1 - r0))
                    qg, kg, vg, lg, dog, sg, dqg, dkg, dvg = (
                        x[i, :, cls].transpose(0, 1) for x in views
                    )  # (R, count, …)
                    scores = torch.bmm(qg, kg.transpose(1, 2)).mul_(d**-0.5).masked_fill_(masked, NEG_INF)
                    gq, gk, gv = tile_grads(scores, qg, kg, vg, lg, dog, sg, d**-0.5)
                    dqg += gq
                    dkg += gk
                    dvg += gv
                    del scores, gq, gk, gv  # before the next step's (see step_elements)


def _group(q, count: int, budget: int, tensors: int = 1) -> int:
    """Classes per step: their scores hold about `budget` elements and, with `tensors` such
    (count, count) and (count, d) per class, at most `step_elements`."""
    return max(1, min(budget // (count * count), step_elements(q) // (tensors * count * (count + q.shape[-1]))))


def _diagonal(count: int, causal: bool, device) -> torch.Tensor:
    """(count, count) keys a class member does not take here: itself (the local part's), later ones if causal."""
    m = torch.arange(count, device=device)
    return (m[None, :] >= m[:, None]) if causal else (m[None, :] == m[:, None])


def _by_head(q, k, v, out, lse, folding: bool, r0: int, r1: int, count: int, l: int, causal: bool, budget: int):
    """One section: per head, groups of classes whose scores hold about `budget` elements (in
    cache) and, with their output, at most `step_elements`."""
    d = q.shape[-1]
    masked = _diagonal(count, causal, q.device)
    qs, ks, vs, outs = (_classes(x, l, r0, r1, count) for x in (q, k, v, out))  # (B·H, count, width[, d]) views
    ls = _classes(lse, l, r0, r1, count) if lse is not None else None
    group, heads = _steps(q, count, r1 - r0, budget)
    for h0 in range(0, qs.shape[0], heads):
        hs = slice(h0, h0 + heads)
        for g0 in range(0, r1 - r0, group):
            cls = slice(g0, min(g0 + group, r1 - r0))
            # (heads, R, count, d): row stride l·d; one head is a batch that bmm reads in place, more are copied
            qg, kg, vg = (x[hs, :, cls].transpose(1, 2) for x in (qs, ks, vs))
            scores = (qg @ kg.transpose(-1, -2)).mul_(d**-0.5).masked_fill_(masked, NEG_INF)  # (heads, R, count, count)
            o, s = softmax_part(scores, lambda p: p @ vg, ls is not None)  # (heads, R, count, d), (heads, R, count)
            dest = outs[hs, :, cls].transpose(1, 2)
            if folding:
                fold(dest, ls[hs, :, cls].transpose(1, 2), o, s)
            else:
                dest.copy_(o)
                if ls is not None:
                    ls[hs, :, cls].transpose(1, 2).copy_(s)
            del scores, o, s  # before the next step's (see step_elements)


def _steps(q, count: int, classes: int, budget: int, tensors: int = 1) -> tuple[int, int]:
    """(classes, heads) of a step: on the CPU one head and `_group`'s classes (in cache); elsewhere,
    where a step is kernel launches, every class of as many heads as `step_elements` holds with the
    copies a batch over heads makes (q, k, v of the group)."""
    if cache_sized(q):
        return _group(q, count, budget, tensors), 1
    group = _group(q, count, step_elements(q), tensors)
    per_head = classes * (tensors * count * (count + q.shape[-1]) + 3 * count * q.shape[-1])
    heads = max(1, step_elements(q) // per_head) if group >= classes else 1
    return group, min(heads, q.shape[0] * q.shape[1])


def _by_group(q, k, v, out, lse, folding: bool, r0: int, r1: int, count: int, l: int, causal: bool):
    """One section through the CPU's fused attention kernel (variants.native.core.fused_kernel): every head at
    once, each class one of its "heads", read in place (row stride l·d); groups of classes so that a
    step's output holds at most `step_elements`. A member with no key (a class's first when causal,
    a class of one) comes back as 0 with lse 0: its lse is made −inf."""
    d = q.shape[-1]
    masked = _diagonal(count, causal, q.device)
    bias = additive(~masked, q.dtype)  # (count, count)
    empty = empty_rows(bias)  # (count,) or None
    qs, ks, vs, outs = (_classes(x, l, r0, r1, count).transpose(1, 2) for x in (q, k, v, out))  # (B·H, R, count, d)
    ls = _classes(lse, l, r0, r1, count).transpose(1, 2) if lse is not None else None  # (B·H, R, count)
    group = max(1, step_elements(q) // (qs.shape[0] * count * (d + 1)))
    for g0 in range(0, r1 - r0, group):
        cls = slice(g0, min(g0 + group, r1 - r0))
        o, s = fused_attention(qs[:, cls], ks[:, cls], vs[:, cls], bias, d**-0.5, empty)  # (B·H, R, count[, d])
        if folding:
            fold(outs[:, cls], ls[:, cls], o, s)
        else:
            outs[:, cls].copy_(o)
            if ls is not None:
                ls[:, cls].copy_(s)
        del o, s  # before the next step's (see step_elements)


def _sections(n: int, l: int) -> list[tuple[int, int, int]]:
    """(first class, end class, members): classes r < rem hold ⌈n/l⌉ positions, the rest one fewer."""
    nb = -(-n // l)
    rem = n - (nb - 1) * l
    return [(r0, r1, c) for r0, r1, c in ((0, rem, nb), (rem, l, nb - 1)) if r1 > r0 and c > 0]


def _classes(x: torch.Tensor, l: int, r0: int, r1: int, count: int) -> torch.Tensor:
    """(B, H, n[, d]) -> the view (B·H, count, r1 - r0[, d]) of positions m·l + r, m < count, r0 <= r < r1.
    NB: `view`, never `reshape`: a result written into a silent copy would be lost (the inputs and
    outputs here are contiguous, or slices of the batch that view as well)."""
    flat = x.view(x.shape[0] * x.shape[1], *x.shape[2:])  # (B·H, n[, d])
    s = flat.stride()
    size = (flat.shape[0], count, r1 - r0, *flat.shape[2:])
    return flat.as_strided(size, (s[0], l * s[1], *s[1:]), flat.storage_offset() + r0 * s[1])
