"""The gated recurrence (rfa, gate = 1): S_t = g_t·S_{t−1} + (1 − g_t)·φ(k_t)v_tᵀ, z likewise, with a
forget gate per position from the feature map (`log_gates`). Its explicit n×n form, and the chunked
linear-time form with its own backward (gated_grad)."""

from __future__ import annotations

import torch

from variants.native.core import grad_of
from variants.native.linearized.forward import linear_time
from variants.native.linearized.gated_grad import Gated, carried, decays
from variants.native.linearized.naive import quadratic
from variants.native.linearized.state import FeatureMap, normalizer, rows_per_step


def gated_quadratic(phi: FeatureMap, q, k, v, causal: bool) -> torch.Tensor:
    """W[t, s] = φ(q_t)·φ(k_s)·(1 − g_s)·Π_{s<u≤t} g_u for s ≤ t: the explicit n×n form."""
    if phi.gate is None:
        return quadratic(phi, q, k, v, causal)
    log_g, log_keep = phi.log_gates(k)
    total = log_g.cumsum(dim=-1)  # (B, H, n)
    decay = total[..., :, None] - total[..., None, :] + log_keep[..., None, :]  # (B, H, n, n)
    later = torch.ones(decay.shape[-2:], dtype=torch.bool, device=q.device).triu(1)
    weights = (phi.query(q) @ phi.key(k)[0].transpose(-1, -2)) * decay.masked_fill(later, float("-inf")).exp()
    return (weights @ v) / weights.sum(dim=-1, keepdim=True)


def gated_linear_time(phi: FeatureMap, q, k, v, causal: bool, step: int = 128) -> torch.Tensor:
    """The gated recurrence by chunks (`gated_chunks`); under autograd with its own backward
    (variants.native.linearized.gated_grad), in a few outputs."""
    if phi.gate is None:
        return linear_time(phi, q, k, v, causal)
    if grad_of(q, k, v):
        return Gated.apply(q, k, v, phi, step, gated_chunks)
    return gated_chunks(phi, q, k, v, step)


def gated_chunks(phi: FeatureMap, q, k, v, step: int) -> torch.Tensor:
    """Within a chunk the masked (C × C) form with its decays, before it the state carried in,
    decayed by the chunk's gates so far. O(n·m·d) time; chunks of at most `step` rows, fewer
    where `rows_per_step` says (a small n). Under autograd, the readable form."""
    step = rows_per_step(phi, q, step, causal=True)
    log_g, log_keep = phi.log_gates(k)
    out, state, z = torch.empty_like(q), None, None
    record = grad_of(q, k, v)
    for r0 in range(0, q.shape[-2], step):
        rows = slice(r0, r0 + step)
        fq, fk, vv = phi.query(q[:, :, rows]), phi.key(k[:, :, rows])[0], v[:, :, rows]
        total = log_g[..., rows].cumsum(dim=-1)  # (B, H, C): log Π_{r0≤u≤t} g_u
        local = (fq @ fk.transpose(-1, -2)) * decays(total, log_keep[..., rows])
        num, den = local @ vv, local.sum(dim=-1)
        if state is not None:
            carry = total.exp()  # how much of the state before r0 is left at t
            num = num + (fq @ state) * carry[..., None]
            den = den + normalizer(fq, z) * carry
        out[:, :, rows] = num / den[..., None]
        tail = fk * (total[..., -1:] - total + log_keep[..., rows]).exp()[..., None]  # (B, H, C, 2m)
        if not record:  # NB: in place: a fresh state beside the old held 3.47 outputs at n = 512, not 2.28
            state, z = carried(state, z, total, tail, vv)
            continue
        fresh_state, fresh_z = tail.transpose(-1, -2) @ vv, tail.sum(dim=-2)  # (B, H, 2m, d), (B, H, 2m)
        left = total[..., -1].exp()  # (B, H)
        state = fresh_state if state is None else state * left[..., None, None] + fresh_state
        z = fresh_z if z is None else z * left[..., None] + fresh_z
    return out
