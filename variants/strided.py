"""Strided pattern (Sparse Transformer, Child et al. 2019, §4): |i − j| < l or (i − j) mod l = 0.

Claim: P ≈ n·(2l + n/l); with l = ⌈√n⌉ the exponent in n is 1.5, with l held constant it is 2.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from variants.masks import causal_clip, named
from variants.native import NEG_INF, Partial, band_plan, fold, grad_of, softmax_part, union
from variants.pattern import native_impl, pattern_variant, rows
from variants.registry import Param, sqrt_n

STRIDE = Param("stride", None, "stride l; default ⌈√n⌉", minimum=1, derive=sqrt_n)


def strided(n: int, params: dict):
    l = params["stride"]
    return named(
        lambda b, h, q_idx, kv_idx: ((q_idx - kv_idx).abs() < l) | ((q_idx - kv_idx) % l == 0),
        f"strided({l})",
    )


def row_counts(n: int, causal: bool, params: dict) -> torch.Tensor:
    i, l = rows(n), params["stride"]
    local = causal_clip((i - l + 1).clamp(min=0), (i + l - 1).clamp(max=n - 1), i, causal)
    before = i // l  # j = i − m·l >= 0, m >= 1
    after = torch.zeros_like(i) if causal else (n - 1 - i) // l
    return local + before + after


def plan(n: int, causal: bool, params: dict, like):
    return band_plan(n, params["stride"] - 1, causal, like), params["stride"], causal


def run(q, k, v, p):
    band, stride, causal = p
    return union(
        q, k, v,
        lambda into: band.part(q, k, v, need_lse=True, into=into),  # |i − j| < l
        lambda into: residue_part(q, k, v, stride=stride, causal=causal, need_lse=True, into=into),  # j ≡ i mod l, j != i
    )


def residue_part(q, k, v, *, stride: int, causal: bool, need_lse: bool, budget: int = 1 << 17,
                 into: Partial | None = None) -> Partial:
    """Keys j with (i - j) mod l == 0 and j != i, as attention within each residue class.

    Positions p = m·l + r go to (r, m): l classes of n/l rows each, so the work is
    l · (n/l)² · d = n²/l · d, i.e. O(n^1.5 · d) for l ∝ √n. Classes go in groups whose scores
    hold about `budget` elements, to keep the working set in cache; a group's rows are read from
    strided views of q, k, v and its results written (or folded) straight back to positions m·l + r,
    so no reordered copy of the whole input or output is ever made (unless l does not divide n).
    """
    b, h, n, d = q.shape
    l = stride
    nb = -(-n // l)
    pad = nb * l - n

    def classes(x):  # (B, H, n, d) -> (B·H, nb, l, d): class r is [:, :, r], a view when l divides n
        x = x.reshape(b * h, n, d)
        return (F.pad(x, (0, 0, 0, pad)) if pad else x).view(b * h, nb, l, d)

    qr, kr, vr = classes(q), classes(k), classes(v)
    m = torch.arange(nb, device=q.device)
    keep = m[None, :] != m[:, None]  # (nb, nb): j != i, the diagonal belongs to the local part
    if causal:
        keep = keep & (m[None, :] < m[:, None])
    real = (m[None, :] * l + torch.arange(l, device=q.device)[:, None]) < n  # (l, nb) keys < n
    masked = ~(keep[None] & real[:, None, :])  # (l, nb, nb)
    grad = grad_of(q, k, v)
    fused = into is not None and not pad and not grad
    out = into.out.view(b * h, nb, l, d) if fused else q.new_empty(b * h, nb, l, d)
    lse = into.lse.view(b * h, nb, l) if fused else (q.new_empty(b * h, nb, l) if need_lse else None)
    group = max(1, budget // (b * h * nb * nb))
    pieces = []
    for r0 in range(0, l, group):
        r1 = min(r0 + group, l)
        qg, kg, vg = (x[:, :, r0:r1].permute(2, 0, 1, 3) for x in (qr, kr, vr))  # (R, B·H, nb, d) views
        scores = (qg @ kg.transpose(-1, -2)).mul_(d**-0.5)  # (R, B·H, nb, nb)
        scores.masked_fill_(masked[r0:r1, None], NEG_INF)
        o, s = softmax_part(scores, lambda p: p @ vg, need_lse or fused)
        o, s = o.permute(1, 2, 0, 3), (s.permute(1, 2, 0) if s is not None else None)  # (B·H, nb, R, ·)
        if grad:
            pieces.append((o, s))
        elif fused:
            fold(out[:, :, r0:r1], lse[:, :, r0:r1], o, s)
        else:
            out[:, :, r0:r1] = o
            if need_lse:
                lse[:, :, r0:r1] = s
    if grad:  # autograd: the groups joined out of place
        out = torch.cat([o for o, _ in pieces], dim=2)
        lse = torch.cat([s for _, s in pieces], dim=2) if need_lse else None
    if fused:
        return into
    part = Partial(out.reshape(b, h, nb * l, d)[:, :, :n], lse.reshape(b, h, nb * l)[:, :, :n] if need_lse else None)
    if into is not None:  # l does not divide n: fold the whole part in
        fold(into.out, into.lse, part.out, part.lse)
        return into
    return part


SPEC = pattern_variant(
    name="strided",
    doc=__doc__,
    source="Child et al. 2019, Generating Long Sequences with Sparse Transformers, §4",
    params=(STRIDE,),
    predicate=strided,
    row_counts=row_counts,
    exponent=lambda explicit: 2.0 if "stride" in explicit else 1.5,
    native=native_impl(plan=plan, run=run, cost="O(n·l·d + n²/l·d): a band plus attention within residue classes"),
)
