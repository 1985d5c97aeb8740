"""The shared core of linearized attention: out_i = φ(q_i)ᵀ S / φ(q_i)ᵀ z with S = Σ φ(k_j) v_jᵀ.

Both `linear` (elu+1) and `performer` (FAVOR+) are a feature map φ plus this core; the feature map
is part of the algorithm, so the dense reference and the native path use the same φ.
"""

from __future__ import annotations

import time
from typing import Callable

import torch
import torch.nn.functional as F

from variants.registry import Impl, Prepared, VariantSpec, register
from variants.theory import Theory

FeatureMap = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]  # (q, k) -> (φq, φk)


def quadratic(fq: torch.Tensor, fk: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    """The explicit form: A = φ(Q)φ(K)ᵀ (n×n), out = A V / rowsum(A). O(n²) by construction."""
    a = fq @ fk.transpose(-1, -2)  # (B, H, n, n)
    if causal:
        a = a.tril()
    return (a @ v) / a.sum(dim=-1, keepdim=True)


def linear_time(fq: torch.Tensor, fk: torch.Tensor, v: torch.Tensor, causal: bool, chunk: int = 64) -> torch.Tensor:
    """Q′(K′ᵀV): O(n·m·d) time, O(m·d) state. Causal: chunked prefix sums over blocks of `chunk`.

    Within a chunk the masked (chunk × chunk) form; across chunks the running state
    S = Σ φ(k_j) v_jᵀ of all earlier chunks (an exclusive cumulative sum).
    """
    if not causal:
        state = fk.transpose(-1, -2) @ v  # (B, H, m, d)
        z = fk.sum(dim=-2)  # (B, H, m)
        return (fq @ state) / (fq @ z[..., None])
    b, h, n, m = fq.shape
    d = v.shape[-1]
    nc = -(-n // chunk)
    pad = nc * chunk - n
    # Padded keys have φ = 0, so they add nothing to any state or normalizer.
    fq_c = F.pad(fq, (0, 0, 0, pad)).view(b, h, nc, chunk, m)
    fk_c = F.pad(fk, (0, 0, 0, pad)).view(b, h, nc, chunk, m)
    v_c = F.pad(v, (0, 0, 0, pad)).view(b, h, nc, chunk, d)
    local = (fq_c @ fk_c.transpose(-1, -2)).tril_()  # (B, H, nc, chunk, chunk)
    states = fk_c.transpose(-1, -2) @ v_c  # (B, H, nc, m, d)
    before = states.cumsum(dim=2) - states  # state of all earlier chunks
    z = fk_c.sum(dim=-2)  # (B, H, nc, m)
    z_before = z.cumsum(dim=2) - z
    num = local @ v_c + fq_c @ before  # (B, H, nc, chunk, d)
    den = local.sum(dim=-1) + (fq_c @ z_before[..., None]).squeeze(-1)  # (B, H, nc, chunk)
    return (num / den[..., None]).reshape(b, h, nc * chunk, d)[:, :, :n]


def impls(features: Callable[[dict, torch.Tensor], FeatureMap]) -> dict[str, Impl]:
    """`dense` (explicit n×n) and `native` (linear time) over the same feature map.

    `features(params, q)` builds the map (random projections are drawn here, in setup).
    """

    def make(name: str, core, cost: str) -> Impl:
        def prepare(q, k, v, *, causal, params):
            start = time.perf_counter()
            phi = features(params, q)
            setup = {"features_s": time.perf_counter() - start}
            return Prepared(lambda: core(*phi(q, k), v, causal), setup)

        return Impl(name, prepare, cost=cost)

    return {
        "dense": make("dense", quadratic, "O(n²·m) time, O(n²) memory: the explicit φ(Q)φ(K)ᵀ"),
        "native": make("native", linear_time, "O(n·m·d): Q′(K′ᵀV), causal by chunked prefix sums"),
    }


def linearized_variant(*, name: str, summary: str, source: str, params, features, theory_fn) -> VariantSpec:
    return register(
        VariantSpec(
            name=name, family="linear", summary=summary, source=source, params=params,
            theory_fn=theory_fn, impls=impls(features),
        )
    )


def linear_theory(*, seq_len, batch, num_heads, num_kv_heads, head_dim, causal, dtype_bytes,
                  params, explicit, spec, features: int | None = None) -> Theory:
    """CLAIMS.md: ≈ 4·B·H·n·m·d for Q′(K′ᵀV) (m = d for elu+1); feature map and normalizer apart."""
    m = head_dim if features is None else features
    bhn = batch * num_heads * seq_len
    extra = {"normalizer": 4 * bhn * m}  # φ(k) sums and φ(q)ᵀz
    if features is not None:
        extra["feature_map"] = 2 * 2 * bhn * head_dim * m  # ωᵀx for q and for k
    return Theory(
        flops=4 * bhn * m * head_dim,
        claimed_exponent_n=1.0,
        claimed_exponent_d=1.0 if features is not None else 2.0,
        extra_flops=extra,
        kv_bytes=2 * batch * num_kv_heads * seq_len * head_dim * dtype_bytes,
    )
