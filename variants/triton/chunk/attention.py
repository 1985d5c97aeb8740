"""Linearized attention through the chunk kernels, with its own backward (`chunk_backward`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from variants.triton.chunk.bwd import chunk_backward
from variants.triton.chunk.fwd import chunk_forward


@dataclass(frozen=True)
class Features:
    """A feature map for the kernels (its kind and W) and for the backward (φ in torch)."""

    kind: int
    w: torch.Tensor | None  # (m, d): FAVOR's ω, FOURIER's ω twice; None for ELU
    features: int | None  # m; None: d (ELU)
    query: Callable  # x -> φ(x) for queries, in torch
    key: Callable  # x -> φ(x) for keys, in torch, at the kernels' stabilizer


class LinearAttend(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, phi: Features, causal: bool):
        out, den = chunk_forward(q, k, v, kind=phi.kind, causal=causal, normalize=True, w=phi.w, features=phi.features)
        ctx.save_for_backward(q, k, v, out, den)
        ctx.phi, ctx.causal = phi, causal
        return out.to(q.dtype)

    @staticmethod
    def backward(ctx, dout):
        q, k, v, out, den = ctx.saved_tensors
        dq, dk, dv = chunk_backward(ctx.phi.query, ctx.phi.key, q, k, v, out, den, dout, ctx.causal)
        return dq, dk, dv, None, None


def linear_attention(q, k, v, phi: Features, causal: bool) -> torch.Tensor:
    """φ(q_t)ᵀ Σ φ(k_s) v_sᵀ / φ(q_t)ᵀ Σ φ(k_s) over s <= t (causal) or every s: (B, H, n_q, d)."""
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        return LinearAttend.apply(q, k, v, phi, causal)
    return chunk_forward(q, k, v, kind=phi.kind, causal=causal, normalize=True, w=phi.w, features=phi.features)[0].to(
        q.dtype
    )
