"""The classic forms' shared parts: seeded weights, the modules and explicit forms they run, their
theories and `classic`, which registers one (declared in variants/catalog: mha_fused, mha_per_head,
additive, multiplicative).

Through `spec.attention(q, k, v)`, the H heads of q, k and v are read as the D = H·d features of the
query, key and value streams (B, n, D); the output comes back split into heads, (B, H, n, d).
"""

from __future__ import annotations

import functools
import time

import torch
import torch.nn.functional as F
from torch import nn

from variants.impls.dense import dense_attention
from variants.rules import (
    SOFTMAX_OPS_PER_PAIR,
    Impl,
    MemoryClaim,
    Param,
    Prepared,
    Theory,
    VariantSpec,
    io_bytes,
    register,
    score_flops,
)

SEED = Param("seed", 0, "seed of the weights", minimum=0)
ATTN_DIM = Param("attn_dim", 64, "width d_a of the additive scoring layer", minimum=1)


@functools.lru_cache(maxsize=32)
def weights(shape: tuple[int, ...], count: int, seed: int) -> tuple[torch.Tensor, ...]:
    """`count` float64 CPU tensors ~ N(0, 1/fan_in), the same for a seed on every device."""
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(shape, generator=gen, dtype=torch.float64) / shape[-1] ** 0.5 for _ in range(count))


def weights_like(shape: tuple[int, ...], count: int, seed: int, like: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The seeded weights on `like`'s device and dtype: a host-to-device copy, done in setup."""
    return tuple(w.to(like.device, like.dtype) for w in weights(shape, count, seed))


def mha_weights(q: torch.Tensor, params: dict) -> tuple[torch.Tensor, ...]:
    dim = q.shape[1] * q.shape[3]
    return weights_like((dim, dim), 4, params["seed"], q)


def additive_weights(q: torch.Tensor, params: dict) -> tuple[torch.Tensor, ...]:
    d, da, seed = q.shape[-1], params["attn_dim"], params["seed"]
    return weights_like((d, da), 2, seed, q) + weights_like((da,), 1, seed + 1, q)


def multiplicative_weights(q: torch.Tensor, params: dict) -> tuple[torch.Tensor, ...]:
    return weights_like((q.shape[-1], q.shape[-1]), 1, params["seed"], q)


def to_streams(x: torch.Tensor) -> torch.Tensor:
    b, h, n, d = x.shape
    return x.transpose(1, 2).reshape(b, n, h * d)  # (B, H, n, d) -> (B, n, D)


def to_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    b, n, dim = x.shape
    return x.view(b, n, heads, dim // heads).transpose(1, 2)  # (B, n, D) -> (B, H, n, d)


# ----------------------------------------------------------------------------- multi-head
class FusedMHA(nn.Module):
    """One D×D projection per stream for all heads, split logically into (B, H, n, d)."""

    def __init__(self, dim: int, heads: int, seed: int = 0, **factory):
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v, self.o = (nn.Linear(dim, dim, bias=False, **factory) for _ in range(4))
        with torch.no_grad():
            for layer, w in zip((self.q, self.k, self.v, self.o), weights((dim, dim), 4, seed)):
                layer.weight.copy_(w)

    def forward(self, xq, xk, xv, causal: bool = False):
        q, k, v = (to_heads(p(x), self.heads) for p, x in ((self.q, xq), (self.k, xk), (self.v, xv)))
        out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)  # (B, H, n, d)
        return self.o(to_streams(out))  # (B, n, D)


class PerHeadMHA(nn.Module):
    """A separate D×d Linear per head and stream, heads attended one by one, then concatenated."""

    def __init__(self, dim: int, heads: int, seed: int = 0, **factory):
        super().__init__()
        d = dim // heads
        wq, wk, wv, wo = weights((dim, dim), 4, seed)  # the fused weights, cut into heads
        self.heads = nn.ModuleList()
        for h in range(heads):
            head = nn.ModuleDict({s: nn.Linear(dim, d, bias=False, **factory) for s in "qkv"})
            with torch.no_grad():
                for s, w in zip("qkv", (wq, wk, wv)):
                    head[s].weight.copy_(w[h * d : (h + 1) * d])
            self.heads.append(head)
        self.o = nn.Linear(dim, dim, bias=False, **factory)
        with torch.no_grad():
            self.o.weight.copy_(wo)

    def forward(self, xq, xk, xv, causal: bool = False):
        outs = []
        for head in self.heads:
            q, k, v = head["q"](xq), head["k"](xk), head["v"](xv)  # (B, n, d) each
            outs.append(F.scaled_dot_product_attention(q, k, v, is_causal=causal))
        return self.o(torch.cat(outs, dim=-1))  # (B, n, D)


def mha_reference(q, k, v, causal: bool, seed: int, ws=None) -> torch.Tensor:
    """The explicit form: projections by einsum, n×n scores materialized."""
    h = q.shape[1]
    wq, wk, wv, wo = ws or mha_weights(q, {"seed": seed})
    qh, kh, vh = (to_heads(to_streams(x) @ w.T, h) for x, w in ((q, wq), (k, wk), (v, wv)))
    return to_heads(to_streams(dense_attention(qh, kh, vh, causal=causal)) @ wo.T, h)


def module_impl(cls) -> Impl:
    def prepare(q, k, v, *, causal, params):
        start = time.perf_counter()
        module = cls(q.shape[1] * q.shape[3], q.shape[1], params["seed"], device=q.device, dtype=q.dtype)
        xq, xk, xv = to_streams(q), to_streams(k), to_streams(v)
        setup = {"weights_s": time.perf_counter() - start}
        return Prepared(lambda: to_heads(module(xq, xk, xv, causal), q.shape[1]), setup)

    cost = (
        "O(n²·d + n·D²): 4 D×D matmuls" if cls is FusedMHA else "O(n²·d + n·D²): 3H D×d matmuls and H attention calls"
    )
    return Impl("native", prepare, cost=cost)


def reference_impl(fn, cost: str, weights_for) -> Impl:
    """The explicit form; its weights are put on the inputs' device and dtype here, in setup."""

    def prepare(q, k, v, *, causal, params):
        start = time.perf_counter()
        ws = weights_for(q, params)
        return Prepared(lambda: fn(q, k, v, causal, ws=ws, **params), {"weights_s": time.perf_counter() - start})

    return Impl("dense", prepare, cost=cost)


def pairs(n: int, causal: bool, kv_len: int | None = None) -> int:
    """Scored pairs; with `kv_len` (cross attention, never causal) n·n_k."""
    if kv_len is not None:
        return n * kv_len
    return n * (n + 1) // 2 if causal else n * n


CROSS = {"exponent_q": 1.0, "exponent_k": 1.0}  # every form here is linear in n_q and in n_k apart


def once(*, batch, num_heads, seq_len, kv_len, head_dim, dtype_bytes, weights: int) -> dict:
    """Compulsory bytes (docs/CLAIMS.md, "Bytes"): q, k, v and the output once, and the `weights`
    (elements). No traffic model: these forms are the references, not paths the roofline follows."""
    moved = weights * dtype_bytes + io_bytes(
        batch=batch,
        num_heads=num_heads,
        num_kv_heads=num_heads,
        query_rows=seq_len,
        key_rows=kv_len or seq_len,
        head_dim=head_dim,
        dtype_bytes=dtype_bytes,
    )
    return {"compulsory_bytes": moved, "fixed_bytes": weights * dtype_bytes}


def mha_theory(
    *, seq_len, batch, num_heads, num_kv_heads, head_dim, causal, dtype_bytes, params, explicit, spec, kv_len=None
):
    p, dim, n_k = pairs(seq_len, causal, kv_len), num_heads * head_dim, kv_len or seq_len
    return Theory(
        flops=score_flops(batch, num_heads, p, head_dim),
        claimed_exponent_n=2.0,
        claimed_exponent_d=1.0,
        pairs=p,
        extra_flops={
            "projections": 2 * batch * (2 * seq_len + 2 * n_k) * dim * dim,  # q and out; k and v
            "softmax": SOFTMAX_OPS_PER_PAIR * batch * num_heads * p,
        },
        note="same FLOPs fused or per head; the claim is that fused is faster",
        **CROSS,
        **once(
            batch=batch,
            num_heads=num_heads,
            seq_len=seq_len,
            kv_len=kv_len,
            head_dim=head_dim,
            dtype_bytes=dtype_bytes,
            weights=4 * dim * dim,
        ),  # W_q, W_k, W_v, W_o
    )


# ----------------------------------------------------------------------------- additive
def additive_scores(qp: torch.Tensor, kp: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """vᵀ tanh(q' + k') for every pair, broadcast: a (B, H, rows, n, d_a) tensor."""
    return torch.tanh(qp[:, :, :, None, :] + kp[:, :, None, :, :]) @ w  # (B, H, rows, n)


def additive(q, k, v, causal: bool, attn_dim: int, seed: int, chunk: int | None = None, ws=None) -> torch.Tensor:
    """Bahdanau scoring; `chunk` rows at a time bounds memory to O(chunk·n·d_a) (time stays O(n²·d_a))."""
    n = q.shape[-2]
    wq, wk, w = ws or additive_weights(q, {"attn_dim": attn_dim, "seed": seed})
    qp, kp = q @ wq, k @ wk  # (B, H, n, d_a)
    outs = []
    for start in range(0, n, chunk or n):
        rows = slice(start, min(start + (chunk or n), n))
        scores = additive_scores(qp[:, :, rows], kp, w)  # (B, H, C, n)
        if causal:
            i = torch.arange(rows.start, rows.stop, device=q.device)[:, None]
            scores = scores.masked_fill(torch.arange(n, device=q.device)[None, :] > i, float("-inf"))
        outs.append(scores.softmax(dim=-1) @ v)
    return torch.cat(outs, dim=2)


def additive_theory(
    *, seq_len, batch, num_heads, num_kv_heads, head_dim, causal, dtype_bytes, params, explicit, spec, kv_len=None
):
    p, da, bh = pairs(seq_len, causal, kv_len), params["attn_dim"], batch * num_heads
    rows = seq_len + (kv_len or seq_len)  # W_q q and W_k k
    return Theory(
        flops=bh * p * (3 * da + 2 * head_dim),
        claimed_exponent_n=2.0,
        pairs=p,
        extra_flops={
            "projections": 2 * bh * rows * head_dim * da,
            "tanh": bh * p * da,
            "softmax": SOFTMAX_OPS_PER_PAIR * bh * p,
        },
        note="per pair: d_a adds and a d_a dot product with v; memory O(n²·d_a) when broadcast",
        **CROSS,
        **once(
            batch=batch,
            num_heads=num_heads,
            seq_len=seq_len,
            kv_len=kv_len,
            head_dim=head_dim,
            dtype_bytes=dtype_bytes,
            weights=2 * head_dim * da + da,
        ),  # W_q, W_k (d, d_a), v (d_a)
    )


# ----------------------------------------------------------------------------- multiplicative
def multiplicative(q, k, v, causal: bool, seed: int, ws=None) -> torch.Tensor:
    """Luong 'general' scores qᵀ W k, unscaled as in the paper, with the n×n scores materialized."""
    (w,) = ws or multiplicative_weights(q, {"seed": seed})
    scores = (q @ w) @ k.transpose(-1, -2)  # (B, H, n, n)
    if causal:
        scores = scores.masked_fill(~torch.ones_like(scores, dtype=torch.bool).tril(), float("-inf"))
    return scores.softmax(dim=-1) @ v


def multiplicative_sdpa() -> Impl:
    def prepare(q, k, v, *, causal, params):
        start = time.perf_counter()
        (w,) = multiplicative_weights(q, params)
        return Prepared(
            lambda: F.scaled_dot_product_attention(q @ w, k, v, is_causal=causal, scale=1.0),
            {"weights_s": time.perf_counter() - start},
        )

    return Impl(
        "sdpa",
        prepare,
        cost="O(n²·d + n·d²): qW once, then the fused kernel",
        library="torch scaled_dot_product_attention",
    )


def multiplicative_theory(
    *, seq_len, batch, num_heads, num_kv_heads, head_dim, causal, dtype_bytes, params, explicit, spec, kv_len=None
):
    p, bh = pairs(seq_len, causal, kv_len), batch * num_heads
    return Theory(
        flops=score_flops(batch, num_heads, p, head_dim),
        claimed_exponent_n=2.0,
        claimed_exponent_d=1.0,
        pairs=p,
        extra_flops={"projections": 2 * bh * seq_len * head_dim * head_dim, "softmax": SOFTMAX_OPS_PER_PAIR * bh * p},
        **CROSS,
        **once(
            batch=batch,
            num_heads=num_heads,
            seq_len=seq_len,
            kv_len=kv_len,
            head_dim=head_dim,
            dtype_bytes=dtype_bytes,
            weights=head_dim * head_dim,
        ),  # W (d, d)
    )


def additive_native() -> Impl:
    def prepare(q, k, v, *, causal, params):
        # about 8 MiB of scores per chunk: memory O(chunk·n·d_a), independent of n² for long inputs
        per_row = q.shape[0] * q.shape[1] * q.shape[2] * params["attn_dim"] * q.element_size()
        chunk = max(1, (8 << 20) // per_row)
        start = time.perf_counter()
        ws = additive_weights(q, params)  # NB: in setup, never in the timed call
        return Prepared(
            lambda: additive(q, k, v, causal, chunk=chunk, ws=ws, **params), {"weights_s": time.perf_counter() - start}
        )

    return Impl("native", prepare, cost="O(n²·d_a) time, O(chunk·n·d_a) memory: query rows in chunks")


def classic_variant(name, summary, source, params, theory_fn, impls, memory: MemoryClaim | None = None) -> VariantSpec:
    return register(
        VariantSpec(
            name=name,
            family="classic",
            summary=summary,
            source=source,
            params=params,
            theory_fn=theory_fn,
            impls={i.name: i for i in impls},
            memory=memory,
            cross=True,  # Bahdanau and Luong scored a decoder state against the encoder's: cross attention first
            padding=True,  # no positions: a prefix is the same form at its own length
        )
    )


def mha_dense() -> Impl:
    """Multi-head attention in its explicit einsum form: both MHA variants' reference."""
    return reference_impl(mha_reference, "O(n²·d + n·D²): explicit einsum form", mha_weights)
