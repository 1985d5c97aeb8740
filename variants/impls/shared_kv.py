"""The shared-KV variants' implementations (MQA, GQA): the library paths and the grouped native kernel,
each checking gqa's `groups` against the KV heads of k."""

from __future__ import annotations

import dataclasses

from variants.impls.dense import dense_impl
from variants.impls.flex import flex_impl
from variants.impls.pattern import pattern_theory
from variants.impls.sdpa import sdpa_impl
from variants.impls.xformers_ops import xformers_bias, xformers_impl
from variants.native.grouped import grouped
from variants.rules import Impl, MemoryClaim, Param, Prepared, VariantSpec, register


def native_grouped() -> Impl:
    def prepare(q, k, v, *, causal, params):
        return Prepared(lambda: grouped(q, k, v, causal))

    return Impl(
        "native",
        prepare,
        cost="O(n²·d) like full, in chunks of query rows; reads H_kv K/V heads, never a repeated copy",
    )


def with_group_check(impl: Impl) -> Impl:
    """gqa's `groups`, when given, must agree with the KV heads of k."""

    def prepare(q, k, v, *, causal, params, **padding):
        if params.get("groups") not in (None, k.shape[1]):
            raise ValueError(f"gqa: parameter groups={params['groups']} (allowed: k.shape[1]={k.shape[1]})")
        return impl.prepare(q, k, v, causal=causal, params=params, **padding)

    return dataclasses.replace(impl, prepare=prepare)


def shared_kv_variant(
    name: str,
    kv_heads: str,
    params: tuple[Param, ...],
    summary: str,
    source: str,
    like: VariantSpec,
    memory: MemoryClaim | None = None,
) -> VariantSpec:
    """A variant of `like`'s pattern (full attention) whose query heads share `kv_heads` K/V heads."""
    impls = [
        dense_impl(None),
        sdpa_impl(None),
        flex_impl(None, name),
        xformers_impl(xformers_bias("full"), work="algorithm"),
        native_grouped(),
    ]
    return register(
        VariantSpec(
            name=name,
            family="shared_kv",
            summary=summary,
            source=source,
            params=params,
            theory_fn=pattern_theory(lambda explicit: 2.0),
            kv_heads=kv_heads,
            memory=memory,
            impls={i.name: with_group_check(i) for i in impls},
            mask_fn=like.mask_fn,
            row_counts_fn=like.row_counts_fn,
            key_reads_fn=like.key_reads_fn,
            decode=True,
            cross=True,
            padding=True,
        )
    )
