"""The shared core of linearized attention: out_i = φ(q_i)ᵀ S / φ(q_i)ᵀ z with S = Σ φ(k_j) v_jᵀ.

Both `linear` (elu+1) and `performer` (FAVOR+) are a feature map φ plus this core; the feature map
is part of the algorithm, so the dense reference and the native path use the same φ.
"""

from __future__ import annotations

import math
import time
from typing import Callable

import torch

from variants.native import step_elements
from variants.steps import cache_elements, cache_rows
from variants.registry import Impl, Prepared, VariantSpec, register
from variants.theory import Theory, io_bytes

class FeatureMap:
    """φ for queries and keys. A key map may return its features divided by exp(s), with a log-scale
    s per head (B, H, 1, 1) of its choosing: a common scale cancels between numerator and normalizer,
    and lets exp-based maps (FAVOR+) stay finite. elu+1 needs none (s = 0). `held`: the (rows × m)
    tensors a call of the map holds at its peak, which sizes the chunks (`rows_per_step`)."""

    held = 1
    scaled = True  # False: the key map's log-scale is always 0, and chunks need no common scale

    def query(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def key(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def warm(self, like: torch.Tensor) -> dict[str, str]:
        """Setup before the timed calls (compile a fused step for like's dtype and device); the notes
        say how the map runs."""
        return {}

    # vjp(x, f, df) -> dx: x's gradient through the map in closed form, for the backward: f is the
    # map at x (the query's features, or the key's at a log-scale the backward holds fixed) and df
    # its gradient, which vjp may overwrite. None: the backward records the map with autograd
    # (variants.linear_grad), the slower and readable form.
    vjp = None


def quadratic(phi: FeatureMap, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    """The explicit form: A = φ(Q)φ(K)ᵀ (n×n), out = A V / rowsum(A). O(n²) by construction."""
    a = phi.query(q) @ phi.key(k)[0].transpose(-1, -2)  # (B, H, n, n)
    if causal:
        a = a.tril()
    return (a @ v) / a.sum(dim=-1, keepdim=True)


def _rescale(state, z, scale, s_chunk):
    """Bring running sums and a new chunk to a common log-scale (the larger one).

    Returns (state, z, scale, weight of the chunk). Out of place when autograd records (it sees
    every step), in place otherwise: the state is (m × d) per head, m/n of the output.
    """
    top = s_chunk if scale is None else torch.maximum(scale, s_chunk)
    if scale is not None:
        factor = torch.exp(scale - top)  # (B, H, 1, 1)
        if _recording(state):
            state, z = state * factor, z * factor.squeeze(-1)  # z is (B, H, m)
        else:
            state.mul_(factor)
            z.mul_(factor.squeeze(-1))
    return state, z, top, torch.exp(s_chunk - top)


def _weigh(phi: FeatureMap, state, z, scale, fk, s):
    """A chunk's key features fk (in place) and the running sums brought to a common log-scale;
    returns (state, z, scale). A map without a scale (`scaled` False) skips it: its weights are 1."""
    if not phi.scaled:
        return state, z, s
    state, z, scale, weight = _rescale(state, z, scale, s)
    fk.mul_(weight)  # weight: (B, H, 1, 1)
    return state, z, scale


def _recording(*tensors) -> bool:
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def _add_product(state, fk, v):
    """state + φ(k)ᵀ v, (B, H, m, d), in place: accumulated by the GEMM itself (baddbmm_), so no
    (m × d) product is held beside the state (at n ≤ m, an output's size). No autograd here."""
    b, h, c, m = fk.shape
    state.view(b * h, m, -1).baddbmm_(fk.reshape(b * h, c, m).transpose(1, 2), v.reshape(b * h, c, -1))
    return state


def linear_time(phi: FeatureMap, q, k, v, causal: bool, *, budget: int = 1 << 18) -> torch.Tensor:
    """Q′(K′ᵀV) in O(n·m·d) time, streaming over row chunks so the working set stays in cache
    (chunks of `rows_per_step`).

    Bidirectional: one pass accumulates S = Σ φ(k_j) v_jᵀ and z = Σ φ(k_j), a second applies them.
    Causal: one pass over chunks; within a chunk the masked (C × C) form, before it the running
    state of all earlier chunks (chunked prefix sums). Under autograd each has its own backward
    (variants.linear_grad), which recomputes φ chunk by chunk.
    """
    b, h, n, d = q.shape
    budget, m = cache_elements(q, budget), _features(phi, d)
    if causal:  # NB: each chunk's (C × C) scores are at most a quarter of the output's size: C² ≤ n·d/4
        step = rows_per_step(phi, q, min(cache_rows(q, masked_rows(m, d)), max(32, budget // (b * h * max(d, m))),
                                         max(32, math.isqrt(n * d // 4))), causal=True)
    else:
        step = rows_per_step(phi, q, max(64, budget // (b * h * max(d, m))))
    if _recording(q, k, v):
        from variants.linear_grad import Bidirectional, Causal  # NB: it builds on this module

        return (Causal if causal else Bidirectional).apply(q, k, v, phi, step)
    return (_causal(phi, q, k, v, step) if causal else _bidirectional(phi, q, k, v, step))[0]


def masked_rows(m: int, d: int) -> int:
    """Rows of a causal chunk where steps are sized to the cache: at most 2·m·d/(m + d), so that the
    chunk's masked products (φ(q)φ(k)ᵀ and its product with v: 2·C²·(m + d) FLOPs) cost no more
    than its share of the algorithm's (4·C·m·d), which alone is counted. Linear (m = d = 64): 64
    rows, where 256 took 1.23-1.45x as long at n = 4096-65536 (one process, float32, one thread, AMD EPYC)."""
    return max(32, 2 * m * d // (m + d))


def _causal(phi: FeatureMap, q, k, v, step: int):
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
            state, z = _zero_state(q, fk.shape[-1])
        state, z, scale = _weigh(phi, state, z, scale, fk, s)
        local = (fq @ fk.transpose(-1, -2)).tril_()  # (B, H, C, C)
        num = local @ v[:, :, rows] + fq @ state
        den = local.sum(dim=-1) + (fq @ z[..., None]).squeeze(-1)
        torch.div(num, den[..., None], out=out[:, :, rows])
        state = _add_product(state, fk, v[:, :, rows])
        z.add_(fk.sum(dim=-2))
        del fq, fk, local, num, den  # before the next step's (see variants.native.step_elements)
    return (out,)


def _zero_state(q, m: int):
    """S (B, H, m, d) and z (B, H, m), zero."""
    b, h, _, d = q.shape
    return q.new_zeros(b, h, m, d), q.new_zeros(b, h, m)


def _bidirectional(phi: FeatureMap, q, k, v, step: int):
    """Without autograd: (out, S, z, log-scale). S (B, H, m, d) and z (B, H, m) are the sums over
    the keys at the final log-scale. NB: keys may be another sequence's (cross attention: n_k ≠ n)."""
    n = q.shape[2]
    out = torch.empty_like(q)
    state = z = scale = None
    for r0 in range(0, k.shape[-2], step):
        fk, s = phi.key(k[:, :, r0 : r0 + step])  # (B, H, C, m)
        if state is None:
            state, z = _zero_state(q, fk.shape[-1])
        state, z, scale = _weigh(phi, state, z, scale, fk, s)
        state = _add_product(state, fk, v[:, :, r0 : r0 + step])
        z.add_(fk.sum(dim=-2))
        del fk  # before the next step's (see variants.native.step_elements)
    for r0 in range(0, n, step):
        fq = phi.query(q[:, :, r0 : r0 + step])
        torch.div(fq @ state, fq @ z[..., None], out=out[:, :, r0 : r0 + step])  # NB: no copy of the quotient
        del fq
    return out, state, z, scale


def rows_per_step(phi: FeatureMap, q: torch.Tensor, cap: int, causal: bool = False, least: int = 16,
                  more: int = 0) -> int:
    """Rows of a chunk: at most `cap`, and few enough that the chunk's features and products stay
    within `step_elements`, so a small n holds about one output too. A row of each head holds the
    map's `held` tensors of m and 2d (its input's copies, the product with the state); a causal
    chunk holds φ(q) and φ(k) at once and 6d (the local and carried products, their sum, the quotient);
    a backward chunk `more` tensors of m besides the map's."""
    b, h, _, d = q.shape
    per_row = (2 if causal else 1) * (phi.held + more) * _features(phi, d) + (6 if causal else 2) * d
    return max(least, min(cap, step_elements(q) // (b * h * per_row)))


def state_of(phi: FeatureMap, k, v):
    """The running state (S, z, log-scale) of the keys and values given: a decode cache. Setup."""
    fk, scale = phi.key(k)  # (B, H, n, m)
    return fk.transpose(-1, -2) @ v, fk.sum(dim=-2), scale  # (B, H, m, d), (B, H, m)


def decode_step(phi: FeatureMap, q, k, v, state) -> torch.Tensor:
    """One decode step: the newest key and value into the state, the one query out of it. O(m·d),
    whatever the length of the cache behind the state."""
    fk, s = phi.key(k)  # (B, H, 1, m)
    big_s, z, scale = state
    big_s, z, _, weight = _rescale(big_s, z, scale, s)
    fk = fk * weight
    big_s, z = big_s + fk.transpose(-1, -2) @ v, z + fk.sum(dim=-2)
    fq = phi.query(q)  # (B, H, 1, m)
    return (fq @ big_s) / (fq @ z[..., None])


def _features(phi: FeatureMap, d: int) -> int:
    return getattr(phi, "features", d)


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
            notes = phi.warm(q)
            if core is linear_time and q.shape[-2] == 1 < k.shape[-2]:  # decode: a state of the cache, then a step
                state = state_of(phi, k[:, :, :-1], v[:, :, :-1])
                setup = {"features_s": time.perf_counter() - start}
                return Prepared(lambda: decode_step(phi, q, k[:, :, -1:], v[:, :, -1:], state), setup, notes)
            setup = {"features_s": time.perf_counter() - start}
            return Prepared(lambda: core(phi, q, k, v, causal), setup, notes)

        return Impl(name, prepare, cost=cost, work=work, extra_reasons=reasons)

    return {
        "dense": make("dense", quadratic_core, "O(n²·m) time, O(n²) memory: the explicit φ(Q)φ(K)ᵀ",
                      "all_pairs"),
        "native": make("native", linear_core, "O(n·m·d): Q′(K′ᵀV) streamed over row chunks, causal by chunked prefix sums; "
                       "decode: one step of the running state, O(m·d)",
                       "algorithm"),
    }


def linearized_variant(*, name: str, summary: str, source: str, params, features, theory_fn,
                       approximates: str | None = None, peers: tuple[Impl, ...] = (), cores=None,
                       reasons=None) -> VariantSpec:
    return register(
        VariantSpec(
            name=name, family="linear", summary=summary, source=source, params=params,
            theory_fn=theory_fn, impls={**impls(features, cores, reasons), **{i.name: i for i in peers}},
            approximates=approximates, cross=True,  # S and z sum over the keys, whichever sequence they come from
            padding=True,  # a prefix's S and z are the sums over its own keys
            decode=cores is None,  # a step of the running state (rfa's gate is its own recurrence: not built)
        )
    )


def linear_theory(*, seq_len, batch, num_heads, num_kv_heads, head_dim, causal, dtype_bytes,
                  params, explicit, spec, features: int | None = None, kv_len: int | None = None,
                  parameters: int = 0) -> Theory:
    """docs/CLAIMS.md: ≈ 2·B·H·(n_q + n_k)·m·d for K′ᵀV and Q′S (4·B·H·n·m·d when n_q = n_k = n;
    m = d for elu+1); feature map and normalizer apart. Bytes: q, k, v and the output once, and the
    feature map's `parameters` (elements), both counts (the state, m·d + m a head, stays in the cache)."""
    m = head_dim if features is None else features
    moved = parameters * dtype_bytes + io_bytes(
        batch=batch, num_heads=num_heads, num_kv_heads=num_kv_heads, query_rows=seq_len,
        key_rows=kv_len or seq_len, head_dim=head_dim, dtype_bytes=dtype_bytes)
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
        exponent_q=1.0, exponent_k=1.0,
        compulsory_bytes=moved, traffic_bytes=moved, fixed_bytes=parameters * dtype_bytes,
        state_bytes=batch * num_heads * (m * head_dim + m) * dtype_bytes,
    )
