"""The gated recurrence's own backward (rfa, gate = 1): a few outputs of memory, where autograd
through its chunks kept every chunk's features and decays (40 outputs at n = 512).

With T_t = Σ_{u≤t} log g_u, b_s = log(1 − g_s), E_ts = exp(T_t − T_s + b_s) and
W_ts = φ(q_t)·φ(k_s)·E_ts for s ≤ t, out_t = N_t/D_t (N_t = Σ_s W_ts v_s, D_t = Σ_s W_ts). With
dN = dO/D, dD = −rowsum(dO ∘ out)/D and G_ts = dN_t·v_s + dD_t:

    dφ(q_t) = Σ_{s≤t} G_ts E_ts φ(k_s) = S_t·dN_t + z_t·dD_t   (S_t, z_t: the forward's decayed state)
    dφ(k_s) = Σ_{t≥s} G_ts E_ts φ(q_t),   dv_s = Σ_{t≥s} W_ts dN_t   (suffix sums, decayed backwards)
    dT_s = −C_s, db_s = C_s with C_s = Σ_t G_ts W_ts = φ(k_s)·dφ(k_s)   (Σ_s G_ts W_ts = 0 for every t)
    d log g_u = Σ_{s≥u} dT_s,  then through the gate's logit into k.

Chunk by chunk as the forward (variants.native.linearized.gated_linear_time): within a chunk the masked C × C
form; across chunks a state carried at the chunk boundary's decay, so every factor is ≤ 1.
"""

from __future__ import annotations

import torch

from variants.native.core import exp_, rowdot
from variants.native.linearized.grad import keep_output, mapped
from variants.native.linearized.state import add_product, normalizer, row_chunks, with_grad, zero_state


class Gated(torch.autograd.Function):
    """(q, k, v) → out of the gated recurrence; the forward keeps out alone."""

    @staticmethod
    def forward(ctx, q, k, v, phi, step: int, chunks):
        return keep_output(ctx, q, k, v, phi, step, chunks)

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out = ctx.saved_tensors
        phi, dout = ctx.phi, dout.contiguous()
        dq, dk, dv = torch.zeros_like(q), k.new_zeros(k.shape), torch.zeros_like(v)
        x, (log_g, log_keep) = with_grad(phi.log_gates_of, phi.gate_logits(k))  # (B, H, n) each
        gates = (log_g.detach(), log_keep.detach())
        chunks = row_chunks(q.shape[-2], ctx.step)
        den = _prefix_pass(phi, q, k, v, out, dout, gates, chunks, dq)
        c = _suffix_pass(phi, q, k, v, out, dout, gates, chunks, den, dk, dv)  # (B, H, n): C_s
        d_log_g = -c.flip(-1).cumsum(-1).flip(-1)  # Σ_{s≥u} dT_s
        d_logits = torch.autograd.grad((log_g, log_keep), x, (d_log_g, c))[0]  # (B, H, n)
        dk.view(-1, k.shape[-1]).addmm_(d_logits.reshape(-1, 1), phi.gate[None])  # NB: w's outer product in place
        return dq, dk, dv, None, None, None


def decays(total, keep):
    """E of a chunk's own rows (B, H, C, C): exp(T_t − T_s + b_s) for s ≤ t, 0 above the diagonal;
    `total` is T from the chunk's start (log Π_{r0≤u≤t} g_u), `keep` is b."""
    c = total.shape[-1]
    later = torch.ones(c, c, dtype=torch.bool, device=total.device).triu_(1)
    return exp_((total[..., :, None] - total[..., None, :] + keep[..., None, :]).masked_fill_(later, float("-inf")))


def _sent(dn, dd, vv, e):
    """G ∘ E of a chunk's own rows (B, H, C, C), G_ts = dN_t·v_s + dD_t."""
    return (dn @ vv.transpose(-1, -2)).add_(dd).mul_(e)


def _row_terms(dout, out, den, rows):
    dn = dout[:, :, rows] / den[:, :, rows, None]  # (B, H, C, d)
    return dn, -rowdot(dn, out[:, :, rows])[..., None]  # (B, H, C, 1)


def carried(big, small, total, rows, values, weights=None):
    """A carried sum across the chunk boundary, in place: big·g + rowsᵀ·values (B, H, 2m, d) and
    small·g + Σ rows (weighted) (B, H, 2m), g = Π of the chunk's gates (exp of total's last)."""
    if big is None:
        big, small = zero_state(values, rows.shape[-1])
    else:
        left = total[..., -1].exp()  # (B, H)
        big.mul_(left[..., None, None])
        small.mul_(left[..., None])
    add_product(big, rows, values)  # NB: the GEMM adds into it: no (2m × d) product beside it
    small.add_((rows if weights is None else rows * weights).sum(-2))
    return big, small


def _prefix_pass(phi, q, k, v, out, dout, gates, chunks, dq):
    """Chunks in order: each row's D, then dφ(q) from the chunk's own terms and the state carried
    in (as the forward carries it); dq through the map. Returns D (B, H, n)."""
    log_g, log_keep = gates
    den = q.new_empty(q.shape[:-1])
    state = z = None
    for rows in chunks:
        f, back = mapped(phi, phi.query, q[:, :, rows])
        fk, vv = phi.key(k[:, :, rows])[0], v[:, :, rows]
        total, keep = log_g[..., rows].cumsum(-1), log_keep[..., rows]  # log Π_{r0≤u≤t} g_u
        carry = total.exp()[..., None]  # (B, H, C, 1): how much of the state before r0 is left at t
        e = decays(total, keep)
        d = (f @ fk.transpose(-1, -2)).mul_(e).sum(-1)
        if state is not None:
            d += normalizer(f, z) * carry.squeeze(-1)
        den[:, :, rows] = d
        dn, dd = _row_terms(dout, out, den, rows)
        dfq = _sent(dn, dd, vv, e) @ fk
        if state is not None:
            dfq += (dn @ state.transpose(-1, -2) + dd * z[..., None, :]) * carry
        dq[:, :, rows] = back(dfq)
        tail = fk.mul_((total[..., -1:] - total + keep).exp()[..., None])  # decayed to the chunk's end
        state, z = carried(state, z, total, tail, vv)
        del f, back, fk, e, dn, dd, dfq, tail  # before the next step's
    return den


def _suffix_pass(phi, q, k, v, out, dout, gates, chunks, den, dk, dv):
    """Chunks in reverse: dφ(k) and dv from the chunk's own terms and the suffix sums P (B, H, 2m, d)
    and p (B, H, 2m) of the later rows, kept relative to the chunk's end; dk through the map.
    Returns C_s = φ(k_s)·dφ(k_s) (B, H, n)."""
    log_g, log_keep = gates
    c_s = q.new_empty(q.shape[:-1])
    big_p = small_p = None
    for rows in reversed(chunks):
        f, vv = phi.query(q[:, :, rows]), v[:, :, rows]
        fkw, back = mapped(phi, lambda y: phi.key(y)[0], k[:, :, rows])
        total, keep = log_g[..., rows].cumsum(-1), log_keep[..., rows]
        dn, dd = _row_terms(dout, out, den, rows)
        e = decays(total, keep)
        dfk = _sent(dn, dd, vv, e).transpose(-1, -2) @ f
        dvv = (f @ fkw.transpose(-1, -2)).mul_(e).transpose(-1, -2) @ dn  # Wᵀ·dN
        if big_p is not None:
            to_end = (total[..., -1:] - total + keep).exp()[..., None]  # (B, H, C, 1): E to the chunk's end
            dfk += (vv @ big_p.transpose(-1, -2) + small_p[..., None, :]) * to_end
            dvv += (fkw @ big_p) * to_end
        c_s[:, :, rows] = rowdot(fkw, dfk)
        dv[:, :, rows] = dvv
        dk[:, :, rows] = back(dfk)
        big_p, small_p = carried(
            big_p, small_p, total, f.mul_(total.exp()[..., None]), dn, dd
        )  # φ(q) to the chunk's start
        del f, back, fkw, dn, dd, e, dfk, dvv  # before the next step's
    return c_s
