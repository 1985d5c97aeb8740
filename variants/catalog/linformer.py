"""Linformer (Wang et al. 2020): keys and values projected along the sequence to k rows.

K′ = E K, V′ = F V with E, F of shape (k, n); out = softmax(Q K′ᵀ/√d) V′. E and F are learned in
the paper; here they are fixed draws from its initialization, N(0, 1/k), seeded and the same on
every device, shared by all heads (the paper's "layerwise sharing" keeps one per layer). Claim:
O(n·k·d) time and memory, exponent 1 in n for a fixed k. Non-causal only: E mixes every position.
"""

from __future__ import annotations

import functools
import itertools
import time

import torch
import torch.nn.functional as F

from variants.impls import peer
from variants.native.core import onednn
from variants.native.grouped import grouped
from variants.rules import (
    SOFTMAX_OPS_PER_PAIR,
    Differs,
    Impl,
    MemoryClaim,
    Param,
    Prepared,
    Theory,
    VariantSpec,
    io_bytes,
    register,
)

PROJ_LEN = Param("proj_len", 256, "projected length k; at most n", minimum=1, maximum=lambda n: n)
SEED = Param("seed", 0, "seed of the projections E, F", minimum=0)


@functools.lru_cache(maxsize=2)
def projections(proj_len: int, seq_len: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """E, F: (k, n) float64 on the CPU, N(0, 1/k)."""
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(proj_len, seq_len, generator=gen, dtype=torch.float64) / proj_len**0.5 for _ in range(2))


def projections_like(params: dict, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return tuple(p.to(k.device, k.dtype) for p in projections(params["proj_len"], k.shape[-2], params["seed"]))


def reference(q, k, v, e, f) -> torch.Tensor:
    """The explicit form: projected keys and values, then softmax written out."""
    kp, vp = e @ k, f @ v  # (B, H, k, d)
    scores = q @ kp.transpose(-1, -2) * q.shape[-1] ** -0.5  # (B, H, n, k)
    weights = torch.exp(scores - scores.amax(dim=-1, keepdim=True))
    return (weights / weights.sum(dim=-1, keepdim=True)) @ vp


def make(name: str, run, cost: str, library: str | None = None) -> Impl:
    def prepare(q, k, v, *, causal, params):
        start = time.perf_counter()
        e, f = projections_like(params, k)
        return Prepared(lambda: run(q, k, v, e, f), {"projections_s": time.perf_counter() - start})

    return Impl(name, prepare, cost=cost, supports_causal=False, library=library)


def native(q, k, v, e, f) -> torch.Tensor:
    """Attention over the k projected keys, (B, H, n, d) from (B, H, k, d): on the CPU in float32 a group of one head
    (variants.native.grouped): two oneDNN products per head and chunk of rows, or its batched products where a chunk
    has under 64 rows (faster than the fused kernel on so few keys: docs/performance.md, "(25) Tiles through oneDNN:
    linformer's projected keys, fixed's blocks, the linearized first pass");
    elsewhere, and under autograd, the fused kernel."""
    kp, vp = project(e, k), project(f, v)
    if onednn.onednn(q, kp):
        return grouped(q, kp, vp, causal=False)
    return F.scaled_dot_product_attention(q, kp, vp)


def project(e: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """E·x for every head, (k, n)·(B, H, n, d) → (B, H, k, d): on the CPU in float32 one oneDNN product a head, x's
    transpose its weight, read in place (variants.native.core.onednn), else E @ x. NB: one product over every head's
    columns, x's transpose copied first, is slower than a product a head (docs/performance.md, "(25) Tiles through
    oneDNN: linformer's projected keys, fixed's blocks, the linearized first pass")."""
    if not onednn.onednn(x, e):
        return e @ x
    b, h, _, d = x.shape
    out = x.new_empty(b, h, e.shape[0], d)
    for i, j in itertools.product(range(b), range(h)):
        out[i, j] = onednn.linear(e, x[i, j].T, strided=True)
    return out


def library_call(q, k, v, causal, params):
    """`linformer`'s LinformerSelfAttention with identity Q/K/V/out maps and our E, F: it reads one
    context for keys and values, so it attends from q to k with values k."""
    from linformer import LinformerSelfAttention
    from torch import nn

    b, h, n, d = q.shape
    layer = LinformerSelfAttention(dim=h * d, seq_len=n, k=params["proj_len"], heads=h, dim_head=d)
    layer = layer.to(q.device, q.dtype)
    for name in ("to_q", "to_k", "to_v", "to_out"):
        setattr(layer, name, nn.Identity())
    e, f = projections_like(params, k)
    with torch.no_grad():
        layer.proj_k.copy_(e.T)
        layer.proj_v.copy_(f.T)
    xq, xk = (t.transpose(1, 2).reshape(b, n, h * d) for t in (q, k))  # (B, n, H·d)
    return lambda: layer(xq, context=xk).view(b, n, h, d).transpose(1, 2)


def theory(*, seq_len, batch, num_heads, num_kv_heads, head_dim, causal, dtype_bytes, params, explicit, spec):
    k, bh = params["proj_len"], batch * num_heads
    pairs = seq_len * k
    projections = 2 * k * seq_len * dtype_bytes  # E and F, one pair for all heads
    moved = projections + io_bytes(
        batch=batch,
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        query_rows=seq_len,
        key_rows=seq_len,
        head_dim=head_dim,
        dtype_bytes=dtype_bytes,
    )
    return Theory(
        flops=4 * bh * pairs * head_dim,
        claimed_exponent_n=1.0,
        claimed_exponent_d=1.0,
        pairs=pairs,
        extra_flops={"projections": 2 * 2 * bh * k * seq_len * head_dim, "softmax": SOFTMAX_OPS_PER_PAIR * bh * pairs},
        kv_bytes=2 * batch * num_kv_heads * seq_len * head_dim * dtype_bytes,
        note="E K and F V are 2·k·n·d each per head: linear in n like the attention itself",
        # NB: traffic = compulsory: the projected K′ and V′ (2·k·d a head) are what the queries read, and stay in the
        # cache
        compulsory_bytes=moved,
        traffic_bytes=moved,
        fixed_bytes=projections,
    )


SPEC = register(
    VariantSpec(
        name="linformer",
        family="linear",
        summary="Linformer: keys and values projected along the sequence to k rows, exact softmax over them, O(n·k·d).",
        source="Wang et al. 2020, Linformer: Self-Attention with Linear Complexity",
        memory=MemoryClaim(
            "Wang et al. 2020, Linformer: linear time and memory in n, for a fixed k; in training too",
            forward=1.0,
            training=1.0,
        ),
        params=(PROJ_LEN, SEED),
        theory_fn=theory,
        cross_note="projects the keys with E, F of shape (k, n) for one length n; cross attention would need them "
        "drawn for n_k (not built here)",
        impls={
            i.name: i
            for i in (
                make("dense", reference, "O(n·k·d): E K, F V, then the n×k scores and softmax written out"),
                make(
                    "native",
                    native,
                    "O(n·k·d): E K, F V, then per head and chunk of rows the scores and P·V′ as two "
                    "oneDNN products (the fused kernel off the CPU)",
                ),
                peer(
                    "linformer",
                    "linformer",
                    library_call,
                    supports_causal=False,
                    cost="O(n·k·d): the package's einsum form, heads split by its own rearrange",
                    differs=Differs(
                        "a layer with one context: keys and values both come from it (v = k here); "
                        "its Q/K/V/out maps set to identity and its E, F to ours",
                        values_are_keys=True,
                    ),
                ),
            )
        },
    )
)
