"""The backward of normalized linearized attention as three unnormalized chunk products (the forward's
kernels with the identity map), the feature maps' own gradients left to autograd (a few whole-tensor
ops). With A = mask(φ(Q)φ(K)ᵀ), N = A·V, D = A·1, out = N/D, g = dO/D, g_D = −rowsum(dO ∘ out)/D,
G = [g, g_D] and V₁ = [V, 1]:

    dφ(Q) = mask(G·V₁ᵀ)·φ(K)        dφ(K) = mask(G·V₁ᵀ)ᵀ·φ(Q)        dV = Aᵀ·g

causal: the first a prefix product, the other two suffix products (the rows walked in reverse, no flipped
copies); bidirectional:
each a product through a d × m state.
"""

from __future__ import annotations

from typing import Callable

import torch

from variants.triton.chunk.features import IDENTITY
from variants.triton.chunk.fwd import chunk_forward


def product(a, b, c, causal: bool, reverse: bool = False) -> torch.Tensor:
    """Σ_{s} (a_t·b_s) c_s over s <= t (causal), s >= t (causal, reverse), or every s."""
    return chunk_forward(a, b, c, kind=IDENTITY, causal=causal, normalize=False, reverse=causal and reverse)[0]


def chunk_backward(query_map: Callable, key_map: Callable, q, k, v, out, den, dout, causal: bool):
    """dq, dk, dv of out = mask(φ(q)φ(k)ᵀ)v / mask(φ(q)φ(k)ᵀ)1, given the forward's out and D (the
    accumulator's dtype). `query_map`, `key_map`: φ in torch (autograd records them)."""
    dt = torch.float32 if q.dtype == torch.float16 else q.dtype  # NB: 1/D passes float16's range (FAVOR+: D can be ~1e-6)
    with torch.enable_grad():  # float16: the maps in float32 too (the plan builds them so: variants.triton.paths)
        qg, kg = q.detach().to(dt).requires_grad_(), k.detach().to(dt).requires_grad_()
        fq, fk = query_map(qg), key_map(kg)
    g = dout.to(out.dtype) / den[..., None]
    gd = -(dout.to(out.dtype) * out).sum(dim=-1, keepdim=True) / den[..., None]
    big_g = torch.cat([g, gd], dim=-1).to(dt)
    v1 = torch.cat([v, torch.ones_like(v[..., :1])], dim=-1)
    v1, fq_, fk_ = v1.to(dt), fq.detach().to(dt), fk.detach().to(dt)
    dfq = product(big_g, v1, fk_, causal)
    dfk = product(v1, big_g, fq_, causal, reverse=True)
    dv = product(fk_, fq_, g.to(dt), causal, reverse=True)
    dq, dk = torch.autograd.grad((fq, fk), (qg, kg), (dfq.to(fq.dtype), dfk.to(fk.dtype)))
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)
