"""Shared keys and values: MQA (Shazeer 2019) and GQA (Ainslie et al. 2023).

Query head h reads KV head ⌊h·G/H⌋. Claim: the FLOPs of `full`; KV bytes 2·B·H_kv·n·d·bytes shrink
H/H_kv times, so decode (one query against a cache of n) gets faster as H_kv falls.
"""

from __future__ import annotations

import dataclasses

import torch

from variants import full
from variants.impls import dense_impl, flex_impl, sdpa_impl, xformers_bias, xformers_impl
from variants.native import NEG_INF, softmax_part, step_elements
from variants.pattern import pattern_theory
from variants.registry import Impl, Param, Prepared, VariantSpec, register

GROUPS = Param("groups", None, "KV heads G (H divisible by G); default: taken from the shape of k", minimum=1)


def grouped(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    """Fold the H/G query heads of a group into rows: one matmul per group, K/V never repeated.

    Query positions go in chunks whose scores hold at most `step_elements` (half the output: about
    d/2 positions of every head against all keys), so no n×n scores are held; a causal chunk
    scores only the keys its last row can see."""
    b, h, n_q, d = q.shape
    g, n_k = k.shape[1], k.shape[2]
    r = h // g  # query heads per group: h = group·r + j
    out = torch.empty_like(q)
    qg, og = q.reshape(b, g, r, n_q, d), out.view(b, g, r, n_q, d)
    # NB: a whole step held 2.0-2.25 outputs at n = 256-4096 while the last chunk's scores outlived it;
    # dropped before the next (del), 1.52-1.75 (measured)
    chunk = max(1, min(n_q, step_elements(q) // (b * h * n_k)))
    for s0 in range(0, n_q, chunk):
        s1 = min(s0 + chunk, n_q)
        keys = n_k - n_q + s1 if causal else n_k  # the keys any row of the chunk sees
        rows = qg[:, :, :, s0:s1].reshape(b, g, r * (s1 - s0), d)
        scores = (rows @ k[:, :, :keys].transpose(-1, -2)).mul_(d**-0.5)  # (B, G, r·c, keys)
        if causal:
            i = torch.arange(s0, s1, device=q.device)[:, None] + (n_k - n_q)
            scores.view(b, g, r, s1 - s0, keys).masked_fill_(torch.arange(keys, device=q.device) > i, NEG_INF)
        probs_v = softmax_part(scores, lambda p: p @ v[:, :, :keys], need_lse=False)[0]  # (B, G, r·c, d)
        og[:, :, :, s0:s1] = probs_v.view(b, g, r, s1 - s0, d)
        del scores, probs_v, rows  # before the next step's (see step_elements)
    return out


def native_grouped() -> Impl:
    def prepare(q, k, v, *, causal, params):
        return Prepared(lambda: grouped(q, k, v, causal))

    return Impl("native", prepare, cost="O(n²·d) like full, in chunks of query rows; reads H_kv K/V heads, never a repeated copy")


def with_group_check(impl: Impl) -> Impl:
    """gqa's `groups`, when given, must agree with the KV heads of k."""

    def prepare(q, k, v, *, causal, params, **padding):
        if params.get("groups") not in (None, k.shape[1]):
            raise ValueError(f"gqa: parameter groups={params['groups']} (allowed: k.shape[1]={k.shape[1]})")
        return impl.prepare(q, k, v, causal=causal, params=params, **padding)

    return dataclasses.replace(impl, prepare=prepare)


def shared_kv_variant(name: str, kv_heads: str, params: tuple[Param, ...], summary: str, source: str) -> VariantSpec:
    impls = [
        dense_impl(None), sdpa_impl(None), flex_impl(None, name),
        xformers_impl(xformers_bias("full"), work="algorithm"), native_grouped(),
    ]
    return register(
        VariantSpec(
            name=name, family="shared_kv", summary=summary, source=source, params=params,
            theory_fn=pattern_theory(lambda explicit: 2.0), kv_heads=kv_heads,
            impls={i.name: with_group_check(i) for i in impls},
            mask_fn=full.SPEC.mask_fn, row_counts_fn=full.row_counts, decode=True, cross=True,
            padding=True,
        )
    )


MQA = shared_kv_variant(
    "mqa", "one", (), "Multi-query attention: all query heads share one K/V head.",
    "Shazeer 2019, Fast Transformer Decoding: One Write-Head is All You Need",
)
GQA = shared_kv_variant(
    "gqa", "divides", (GROUPS,), "Grouped-query attention: G K/V heads, each shared by H/G query heads.",
    "Ainslie et al. 2023, GQA: Training Generalized Multi-Query Transformer Models",
)
