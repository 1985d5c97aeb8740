"""Shared keys and values: MQA (Shazeer 2019) and GQA (Ainslie et al. 2023).

Query head h reads KV head ⌊h·G/H⌋. Claim: the FLOPs of `full`; KV bytes 2·B·H_kv·n·d·bytes shrink
H/H_kv times, so decode (one query against a cache of n) gets faster as H_kv falls.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from variants import full
from variants.impls import dense_impl, flex_impl, sdpa_impl, xformers_bias, xformers_impl
from variants.native import NEG_INF, KeySet, Partial, output, softmax_part, step_elements
from variants.part_grad import tile_grads
from variants.pattern import pattern_theory
from variants.registry import Impl, Param, Prepared, VariantSpec, register

GROUPS = Param("groups", None, "KV heads G (H divisible by G); default: taken from the shape of k", minimum=1)


def grouped(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> torch.Tensor:
    """Fold the H/G query heads of a group into rows: one matmul per group, K/V never repeated
    (`GroupedKeys`; under autograd with its own backward, variants.part_grad)."""
    return output(q, k, v, GroupedKeys(causal))


@dataclass(frozen=True)
class GroupedKeys(KeySet):
    """Every key of the query head's group (j <= i + n_k − n_q when causal). Query positions go in
    chunks whose scores hold at most `step_elements` (half the output: about d/2 positions of every
    head against all keys), so no n×n scores are held; a causal chunk scores only the keys its last
    row can see."""

    causal: bool

    def steps(self, q, k, v, need_lse: bool, into: Partial | None) -> Partial:
        if into is not None:
            raise NotImplementedError("GroupedKeys is a whole pattern: it folds into no other set")
        b, h, n_q, d = q.shape
        out = torch.empty_like(q)
        lse = q.new_empty(b, h, n_q) if need_lse else None
        for at, keys, rows, scores in self._tiles(q, k, tensors=1):
            o, l = softmax_part(scores, lambda p: p @ v[:, :, :keys], need_lse)  # (B, G, r·c, d), (B, G, r·c)
            at(out)[...] = o.view(at(out).shape)
            if need_lse:
                at(lse)[...] = l.view(at(lse).shape)
            del scores, rows, o, l  # before the next step's (see step_elements)
        return Partial(out, lse)

    def grads(self, q, k, v, lse, dout, shift, dq, dk, dv) -> None:
        for at, keys, rows, scores in self._tiles(q, k, tensors=2):  # P and dS
            flat = lambda x: at(x).flatten(2, 3)  # noqa: E731  (B, G, r·c, …)
            gq, gk, gv = tile_grads(scores, rows, k[:, :, :keys], v[:, :, :keys], flat(lse), flat(dout), flat(shift),
                                    q.shape[-1] ** -0.5)
            at(dq).add_(gq.view(at(dq).shape))
            dk[:, :, :keys] += gk
            dv[:, :, :keys] += gv
            del rows, scores, gq, gk, gv

    def _tiles(self, q, k, tensors: int):
        """(at: the chunk's (B, G, r, c, …) view of a (B, H, n, …) tensor, keys seen, rows (B, G, r·c, d),
        scores (B, G, r·c, keys) masked at −inf)."""
        b, h, n_q, d = q.shape
        g, n_k = k.shape[1], k.shape[2]
        r = h // g  # query heads per group: h = group·r + j
        # NB: a whole step held 2.0-2.25 outputs at n = 256-4096 while the last chunk's scores outlived it;
        # dropped before the next (del), 1.52-1.75 (measured)
        chunk = max(1, min(n_q, step_elements(q) // (tensors * b * h * n_k)))
        for s0 in range(0, n_q, chunk):
            s1 = min(s0 + chunk, n_q)
            keys = n_k - n_q + s1 if self.causal else n_k  # the keys any row of the chunk sees
            at = lambda x, s0=s0, s1=s1: x.view(b, g, r, n_q, *x.shape[3:])[:, :, :, s0:s1]  # noqa: E731
            rows = at(q).reshape(b, g, r * (s1 - s0), d)
            scores = (rows @ k[:, :, :keys].transpose(-1, -2)).mul_(d**-0.5)  # (B, G, r·c, keys)
            if self.causal:
                i = torch.arange(s0, s1, device=q.device)[:, None] + (n_k - n_q)
                scores.view(b, g, r, s1 - s0, keys).masked_fill_(torch.arange(keys, device=q.device) > i, NEG_INF)
            yield at, keys, rows, scores
            del rows, scores  # NB: the generator's names would keep this step alive beside the next


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
            mask_fn=full.SPEC.mask_fn, row_counts_fn=full.row_counts, key_reads_fn=full.key_reads, decode=True, cross=True,
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
