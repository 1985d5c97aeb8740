"""A linearized variant's implementations: `dense` (explicit n×n) and `native` (linear time) over one
feature map, and the theory the family shares."""

from __future__ import annotations

import time
from typing import Callable

import torch

from variants.native.linearized import FeatureMap, decode_step, linear_time, quadratic, state_of
from variants.rules.registry import Impl, Prepared, VariantSpec, register
from variants.rules.theory import MemoryClaim, Theory, io_bytes


def impls(features: Callable[[dict, torch.Tensor], FeatureMap], cores=None, reasons=None) -> dict[str, Impl]:
    """`dense` (explicit n×n) and `native` (linear time) over the same feature map.

    `features(params, q)` builds the FeatureMap (random projections are drawn here, in setup);
    `cores` replaces (quadratic, linear_time) where a variant's recurrence differs (rfa's gate).
    """
    quadratic_core, linear_core = cores or (quadratic, linear_time)

    def make(name: str, core, cost: str, work: str) -> Impl:
        def prepare(q, k, v, *, causal, params):
            start = time.perf_counter()
            phi = features(params, q)
            notes = phi.warm(q, max(q.shape[-2], k.shape[-2]))  # the most rows a call of the map takes
            if core is linear_time and q.shape[-2] == 1 < k.shape[-2]:  # decode: a state of the cache, then a step
                state = state_of(phi, k[:, :, :-1], v[:, :, :-1])
                setup = {"features_s": time.perf_counter() - start}
                return Prepared(lambda: decode_step(phi, q, k[:, :, -1:], v[:, :, -1:], state), setup, notes)
            setup = {"features_s": time.perf_counter() - start}
            return Prepared(lambda: core(phi, q, k, v, causal), setup, notes)

        return Impl(name, prepare, cost=cost, work=work, extra_reasons=reasons)

    return {
        "dense": make("dense", quadratic_core, "O(n²·m) time, O(n²) memory: the explicit φ(Q)φ(K)ᵀ", "all_pairs"),
        "native": make(
            "native",
            linear_core,
            "O(n·m·d): Q′(K′ᵀV) streamed over row chunks, causal by chunked prefix sums; "
            "decode: one step of the running state, O(m·d)",
            "algorithm",
        ),
    }


def linearized_variant(
    *,
    name: str,
    summary: str,
    source: str,
    params,
    features,
    theory_fn,
    approximates: str | None = None,
    peers: tuple[Impl, ...] = (),
    cores=None,
    reasons=None,
    memory: MemoryClaim | None = None,
) -> VariantSpec:
    return register(
        VariantSpec(
            name=name,
            family="linear",
            summary=summary,
            source=source,
            params=params,
            theory_fn=theory_fn,
            impls={**impls(features, cores, reasons), **{i.name: i for i in peers}},
            approximates=approximates,
            memory=memory,
            cross=True,  # S and z sum over the keys, whichever sequence they come from
            padding=True,  # a prefix's S and z are the sums over its own keys
            decode=cores is None,  # a step of the running state (rfa's gate is its own recurrence: not built)
        )
    )


def linear_theory(
    *,
    seq_len,
    batch,
    num_heads,
    num_kv_heads,
    head_dim,
    causal,
    dtype_bytes,
    params,
    explicit,
    spec,
    features: int | None = None,
    kv_len: int | None = None,
    parameters: int = 0,
) -> Theory:
    """docs/CLAIMS.md: ≈ 2·B·H·(n_q + n_k)·m·d for K′ᵀV and Q′S (4·B·H·n·m·d when n_q = n_k = n;
    m = d for elu+1); feature map and normalizer apart. Bytes: q, k, v and the output once, and the
    feature map's `parameters` (elements), both counts (the state, m·d + m a head, stays in the cache)."""
    m = head_dim if features is None else features
    moved = parameters * dtype_bytes + io_bytes(
        batch=batch,
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        query_rows=seq_len,
        key_rows=kv_len or seq_len,
        head_dim=head_dim,
        dtype_bytes=dtype_bytes,
    )
    rows = batch * num_heads * (seq_len + (kv_len or seq_len))  # query rows and key rows
    extra = {"normalizer": 2 * rows * m}  # φ(k) sums and φ(q)ᵀz
    if features is not None:
        extra["feature_map"] = 2 * rows * head_dim * m  # ωᵀx for q and for k
    return Theory(
        flops=2 * rows * m * head_dim,
        claimed_exponent_n=1.0,
        claimed_exponent_d=1.0 if features is not None else 2.0,
        extra_flops=extra,
        kv_bytes=2 * batch * num_kv_heads * (kv_len or seq_len) * head_dim * dtype_bytes,
        exponent_q=1.0,
        exponent_k=1.0,
        compulsory_bytes=moved,
        traffic_bytes=moved,
        fixed_bytes=parameters * dtype_bytes,
        state_bytes=batch * num_heads * (m * head_dim + m) * dtype_bytes,
    )
