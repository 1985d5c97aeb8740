"""The linear-time passes without autograd: a causal pass of chunks against the running state, and a
bidirectional pass that sums the keys' state, then applies it."""

from __future__ import annotations

import itertools

import torch

from variants.native.core import onednn
from variants.native.linearized.state import (
    FeatureMap,
    add_product,
    features_of,
    normalizer,
    rows_per_step,
    weigh,
    zero_state,
)
from variants.rules.paths import took


def causal_chunks(phi: FeatureMap, q, k, v, step: int):
    """Without autograd: (out,) by chunks of `step` rows, each against the running state of the
    chunks before it and, masked, its own keys."""
    b, h, n, d = q.shape
    out = torch.empty_like(q)
    state = z = scale = None
    for r0 in range(0, n, step):
        rows = slice(r0, r0 + step)
        fq = phi.query(q[:, :, rows])
        fk, s = phi.key(k[:, :, rows])
        if state is None:
            state, z = zero_state(q, fk.shape[-1])
        state, z, scale = weigh(phi, state, z, scale, fk, s)
        local = (fq @ fk.transpose(-1, -2)).tril_()  # (B, H, C, C)
        num = local @ v[:, :, rows] + fq @ state
        den = local.sum(dim=-1) + normalizer(fq, z)
        torch.div(num, den[..., None], out=out[:, :, rows])
        state = add_product(state, fk, v[:, :, rows])
        z.add_(fk.sum(dim=-2))
        del fq, fk, local, num, den  # before the next step's (see variants.native.core.steps)
    return (out,)


# NB: the oneDNN pass's chunks hold about 2^20 features (4 MB in float32) over the heads: linear (m = 64, H = 8)
# 2048 rows, performer and rfa (m = 256) 512: the chunk sizes that ran fastest (docs/performance.md, "(23) The
# linearized paths' second pass through oneDNN").
APPLY_ELEMENTS = 1 << 20
# The first pass through oneDNN from this many features: faster than baddbmm_ for performer's m = 256, slower for
# linear's m = 64 (docs/performance.md, "(25) Tiles through oneDNN: linformer's projected keys, fixed's blocks, the
# linearized first pass").
SUM_FEATURES = 128


def bidirectional_chunks(phi: FeatureMap, q, k, v, step: int):
    """Without autograd: (out, S, z, log-scale). S (B, H, m, d) and z (B, H, m) are the sums over
    the keys at the final log-scale. NB: keys may be another sequence's (cross attention: n_k ≠ n)."""
    n = q.shape[2]
    out = torch.empty_like(q)
    summed = _sums_by_onednn(phi, q, k, v)
    if summed:
        state, z, scale, weight = _keys_onednn(phi, k, v, _apply_rows(phi, q, step, features_of(phi, q.shape[-1])))
    else:
        state = z = scale = weight = None
        for r0 in range(0, k.shape[-2], step):
            fk, s = phi.key(k[:, :, r0 : r0 + step])  # (B, H, C, m)
            if state is None:
                state, z = zero_state(q, fk.shape[-1])
            state, z, scale = weigh(phi, state, z, scale, fk, s)
            state = add_product(state, fk, v[:, :, r0 : r0 + step])
            z.add_(fk.sum(dim=-2))
            del fk  # before the next step's (see variants.native.core.steps)
    weight, step = _by_onednn(phi, q, state, z, step, weight)
    took("sums " + ("onednn" if summed else "batched"))
    took("apply " + ("batched" if weight is None else "onednn"))
    for r0 in range(0, n, step):
        fq, rows = phi.query(q[:, :, r0 : r0 + step]), out[:, :, r0 : r0 + step]
        if weight is None:
            torch.div(fq @ state, normalizer(fq, z)[..., None], out=rows)  # NB: no copy of the quotient
        else:
            _apply_onednn(fq, weight, rows)
        del fq
    return out, state, z, scale


def _by_onednn(phi: FeatureMap, q, state, z, step: int, weight=None):
    """(the weight [S, z]ᵀ per head, (B, H, d + 1, m), and the pass's rows) where the pass goes through oneDNN:
    float32 on the CPU, the weight at most a quarter of the output (m ≤ n/4, as a chunk's temporaries are),
    chunks of about APPLY_ELEMENTS features. Else (None, step). The weight's last row gives φ(q)ᵀz; a weight the
    first pass summed is used as it is."""
    b, h, m, d = state.shape
    if not _onednn_weight(q, m, state):
        return None, step
    if weight is None:
        weight = state.new_empty(b, h, d + 1, m)
        weight[:, :, :d].copy_(state.transpose(-1, -2))
        weight[:, :, d].copy_(z)
    return weight, _apply_rows(phi, q, step, m)


def _apply_rows(phi: FeatureMap, q, step: int, m: int) -> int:
    """Rows of a oneDNN pass's chunk: about APPLY_ELEMENTS features over the heads, within the memory rule."""
    return rows_per_step(phi, q, max(step, APPLY_ELEMENTS // (q.shape[0] * q.shape[1] * m)))


def _onednn_weight(q, m: int, *operands) -> bool:
    """float32 on the CPU, none of q and `operands` recorded, and [S, z]ᵀ at most a quarter of the output: m ≤ n/4."""
    return 4 * m <= q.shape[2] and all(onednn.onednn(q, x) for x in operands)


def _sums_by_onednn(phi: FeatureMap, q, k, v) -> bool:
    """Whether the first pass sums [S, z]ᵀ through oneDNN: where the second pass takes that weight, and the map has
    SUM_FEATURES features or more."""
    m = features_of(phi, q.shape[-1])
    return m >= SUM_FEATURES and _onednn_weight(q, m, k, v)


def _keys_onednn(phi: FeatureMap, k, v, step: int):
    """The first pass through oneDNN: (S, z, log-scale, [S, z]ᵀ). Per chunk and head [S, z]ᵀ += [vᵀ; 1]·φ(k), one
    product with its sum a post-op, φ(k)ᵀ read in place; S and z are views of [S, z]ᵀ, rescaled in place (`weigh`)."""
    b, h, n_k, d = k.shape
    weight = state = z = scale = x = None
    for r0 in range(0, n_k, step):
        fk, s = phi.key(k[:, :, r0 : r0 + step])  # (B, H, C, m)
        c = fk.shape[2]
        if weight is None:
            weight = k.new_zeros(b, h, d + 1, fk.shape[-1])
            state, z = weight[:, :, :d].transpose(-1, -2), weight[:, :, d]  # (B, H, m, d), (B, H, m): views
        state, z, scale = weigh(phi, state, z, scale, fk, s)
        if x is None or x.shape[1] != c:
            x = k.new_ones(d + 1, c)  # [vᵀ; 1] of a chunk and head: its last row sums z
        for i, j in itertools.product(range(b), range(h)):
            x[:d].copy_(v[i, j, r0 : r0 + c].T)
            weight[i, j] = onednn.linear_add(x, fk[i, j].T, weight[i, j])
        del fk  # before the next step's (see variants.native.core.steps)
    return state, z, scale, weight


def _apply_onednn(fq, weight, out) -> None:
    """out = φ(q)ᵀS / φ(q)ᵀz for a chunk's features fq (B, H, C, m), one 2-D oneDNN product per head."""
    b, h, _, d = out.shape
    for i in range(b):
        for j in range(h):
            y = onednn.linear(fq[i, j], weight[i, j])  # (C, d + 1)
            torch.div(y[:, :d], y[:, d:], out=out[i, j])
