"""The backward of normalized linearized attention as three unnormalized chunk products (the forward's
kernels with the identity map), the feature maps' own gradients left to autograd (a few whole-tensor
ops). With A = mask(φ(Q)φ(K)ᵀ), N = A·V, D = A·1, out = N/D, g = dO/D, g_D = −rowsum(dO ∘ out)/D,
G = [g, g_D] and V₁ = [V, 1]:

    dφ(Q) = mask(G·V₁ᵀ)·φ(K)        dφ(K) = mask(G·V₁ᵀ)ᵀ·φ(Q)        dV = Aᵀ·g

causal: the first a prefix product, the other two suffix products (the rows walked in reverse, no flipped
copies); bidirectional: each a product through a d × m state. G and V₁ come from one kernel
(`grad_inputs_kernel`: dO, out and D read once), not a dozen whole-tensor ops.
"""

from __future__ import annotations

from typing import Callable

import torch
import triton
import triton.language as tl

from variants.triton.chunk.features import IDENTITY
from variants.triton.chunk.fwd import chunk_forward
from variants.triton.tiles import Tiles, launch

ROWS = 64  # rows of a program of grad_inputs_kernel


@triton.jit(do_not_specialize=["H"])  # the parameters: one compile for all (variants.triton.tiles)
def grad_inputs_kernel(
    DO,
    O,
    DEN,
    V,
    G,
    V1,
    sdo_b,
    sdo_h,
    sdo_n,
    sv_b,
    sv_h,
    sv_n,
    H,
    n,
    e,
    ACC: tl.constexpr,
    BT: tl.constexpr,
    BE: tl.constexpr,
):
    """G = [dO/D, −rowsum(dO ∘ out)/D] and V₁ = [V, 1], (B, H, n, e + 1) contiguous, in their dtype."""
    bh = tl.program_id(1)
    b, h = bh // H, bh % H
    t = tl.program_id(0) * BT + tl.arange(0, BT)
    c = tl.arange(0, BE)
    rows = t < n
    tile = rows[:, None] & (c < e)[None, :]
    do = tl.load(DO + b * sdo_b + h * sdo_h + t[:, None] * sdo_n + c[None, :], mask=tile, other=0.0).to(ACC)
    out = tl.load(O + bh * n * e + t[:, None] * e + c[None, :], mask=tile, other=0.0).to(ACC)  # contiguous
    den = tl.load(DEN + bh * n + t, mask=rows, other=1.0).to(ACC)
    row = bh * n * (e + 1) + t * (e + 1)
    tl.store(G + row[:, None] + c[None, :], do / den[:, None], mask=tile)
    tl.store(G + row + e, -tl.sum(do * out, 1) / den, mask=rows)
    v = tl.load(V + b * sv_b + h * sv_h + t[:, None] * sv_n + c[None, :], mask=tile, other=0.0)
    tl.store(V1 + row[:, None] + c[None, :], v, mask=tile)
    tl.store(V1 + row + e, tl.full([BT], 1.0, ACC), mask=rows)


def grad_inputs(dout, out, den, v, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(G, V₁) in `dtype`: dO and V with unit last stride, out (B, H, n, e) and D contiguous."""
    b, h, n, e = v.shape
    g = torch.empty(b, h, n, e + 1, dtype=dtype, device=v.device)
    v1 = torch.empty_like(g)
    acc = tl.float64 if out.dtype == torch.float64 else tl.float32
    launch(
        grad_inputs_kernel,
        (triton.cdiv(n, ROWS), b * h),
        dout,
        out,
        den,
        v,
        g,
        v1,
        *dout.stride()[:3],
        *v.stride()[:3],
        h,
        n,
        e,
        ACC=acc,
        BT=ROWS,
        BE=Tiles.head(e),
        num_warps=4,
        num_stages=1,
    )
    return g, v1


def product(a, b, c, causal: bool, reverse: bool = False) -> torch.Tensor:
    """Σ_{s} (a_t·b_s) c_s over s <= t (causal), s >= t (causal, reverse), or every s."""
    return chunk_forward(a, b, c, kind=IDENTITY, causal=causal, normalize=False, reverse=causal and reverse)[0]


def chunk_backward(query_map: Callable, key_map: Callable, q, k, v, out, den, dout, causal: bool):
    """dq, dk, dv of out = mask(φ(q)φ(k)ᵀ)v / mask(φ(q)φ(k)ᵀ)1, given the forward's out and D (the
    accumulator's dtype). `query_map`, `key_map`: φ in torch (autograd records them)."""
    dt = (
        torch.float32 if q.dtype == torch.float16 else q.dtype
    )  # NB: 1/D passes float16's range (FAVOR+: D can be ~1e-6)
    with torch.enable_grad():  # float16: the maps in float32 too (the plan builds them so: variants.triton.paths)
        qg, kg = q.detach().to(dt).requires_grad_(), k.detach().to(dt).requires_grad_()
        fq, fk = query_map(qg), key_map(kg)
    big_g, v1 = grad_inputs(_unit_last(dout), out.contiguous(), den.contiguous(), _unit_last(v), dt)
    fq_, fk_ = fq.detach().to(dt), fk.detach().to(dt)
    dfq = product(big_g, v1, fk_, causal)
    dfk = product(v1, big_g, fq_, causal, reverse=True)
    dv = product(fk_, fq_, big_g[..., :-1], causal, reverse=True)  # g: a view (the kernels take strides)
    dq, dk = torch.autograd.grad((fq, fk), (qg, kg), (dfq.to(fq.dtype), dfk.to(fk.dtype)))
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


def _unit_last(x: torch.Tensor) -> torch.Tensor:
    return x if x.stride(-1) == 1 else x.contiguous()
