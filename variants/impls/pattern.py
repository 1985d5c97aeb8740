"""Score-based sparse patterns: one predicate, one pair count, and the standard implementations.

A pattern module declares its predicate (attention-gym style), its pairs per row (the formula of
docs/CLAIMS.md, evaluated row by row so it can be checked against the mask), its claimed exponent and
its `native` implementation; `pattern_variant` turns that into a registered `VariantSpec`.
"""

from __future__ import annotations

import dataclasses
import inspect
import time
from typing import Callable

import torch

from variants.impls.dense import dense_attention, dense_impl
from variants.impls.flex import flex_impl
from variants.impls.sdpa import sdpa_impl
from variants.rules import (
    NOT_PREFIX,
    Impl,
    MaskMod,
    MemoryClaim,
    Param,
    Prepared,
    Theory,
    VariantSpec,
    dense_mask,
    register,
    score_theory,
    tiles,
    with_causal,
)


def pattern_theory(exponent: Callable[[frozenset[str]], float], note: str = "") -> Callable[..., Theory]:
    """Theory of a pattern: P summed from its row counts, 4·B·H·P·d FLOPs, its claimed exponent;
    bytes from its key reads and index entries (docs/CLAIMS.md, "Bytes")."""

    def theory_fn(
        *, seq_len, batch, num_heads, num_kv_heads, head_dim, causal, dtype_bytes, params, explicit, spec, kv_len=None
    ):
        if kv_len is None:
            pairs, exponents_qk = int(spec.row_counts_fn(seq_len, causal, params).sum()), None
            reads = None if spec.key_reads_fn is None else spec.key_reads_fn(seq_len, causal, params)
        else:  # cross attention (full, mqa, gqa): every query against every key of the other sequence
            pairs, exponents_qk = seq_len * kv_len, (1.0, 1.0)
            reads = len(tiles(seq_len)[0]) * kv_len
        return score_theory(
            pairs=pairs,
            batch=batch,
            num_heads=num_heads,
            num_kv_heads=num_kv_heads,
            seq_len=kv_len or seq_len,
            head_dim=head_dim,
            dtype_bytes=dtype_bytes,
            exponent_n=exponent(explicit),
            note=note,
            exponents_qk=exponents_qk,
            query_len=seq_len,
            key_reads=reads,
            index_entries=seq_len * spec.index_fn(params) if spec.index_fn else 0,
        )

    return theory_fn


def tile_bounds(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The traffic model's query tiles (variants.rules.theory.tiles) as int64 tensors: starts s, ends e."""
    starts, ends = tiles(n)
    return torch.tensor(starts, dtype=torch.long), torch.tensor(ends, dtype=torch.long)


def range_reads(lo: torch.Tensor, hi: torch.Tensor) -> int:
    """Σ (hi − lo) over the tiles: each tile reads the keys [lo, hi)."""
    return int((hi - lo).sum())


def native_impl(plan: Callable, run: Callable, cost: str, gathers: bool = False) -> Impl:
    """A `native` implementation: `plan(n, causal, params, like=q)` is setup, `run(q, k, v, plan)` is timed;
    `gathers`: its leading term's work reads K's and V's rows at random (Impl.gathers)."""

    def prepare(q, k, v, *, causal, params):
        start = time.perf_counter()
        layout = plan(q.shape[-2], causal, params, q)
        setup = {"plan_s": time.perf_counter() - start}
        return Prepared(lambda: run(q, k, v, layout), setup)

    return Impl("native", prepare, cost=cost, gathers=gathers)


def with_decode(native: Impl, mask_for: Callable) -> Impl:
    """The native path, and its decode step: the last row's allowed keys, found in setup from the
    predicate (one row, O(n)), gathered and attended in the timed call: O(P_last·d)."""

    def prepare(q, k, v, *, causal, params):
        n_q, n_k = q.shape[-2], k.shape[-2]
        if n_q == n_k:
            return native.prepare(q, k, v, causal=causal, params=params)
        start = time.perf_counter()
        row = dense_mask(mask_for(n_k, causal, params, device=q.device), n_k, device=q.device, rows=1)[0]
        keys = row.nonzero().squeeze(1)  # (P_last,) the last query's keys
        setup = {"plan_s": time.perf_counter() - start}
        return Prepared(lambda: dense_attention(q, k.index_select(2, keys), v.index_select(2, keys)), setup)

    return dataclasses.replace(
        native, prepare=prepare, cost=native.cost + "; decode: the last row's keys gathered, O(P_last·d)"
    )


def pattern_variant(
    *,
    name: str,
    doc: str,
    source: str,
    params: tuple[Param, ...],
    predicate: Callable[[int, dict], MaskMod],
    row_counts: Callable[[int, bool, dict], torch.Tensor],
    exponent: Callable[[frozenset[str]], float],
    native: Impl | None,
    key_reads: Callable[[int, bool, dict], int] | None = None,
    index: Callable[[dict], int] | None = None,
    extra_impls: tuple[Impl, ...] = (),
    note: str = "",
    check: Callable[[int, dict], None] | None = None,
    padding: bool = False,
    padding_note: str = NOT_PREFIX,
    memory: MemoryClaim | None = None,
) -> VariantSpec:
    """Register a score-based pattern with dense, sdpa, flex, native and any extra impls; `key_reads`
    and `index` give its bytes (docs/CLAIMS.md, "Bytes")."""

    takes_device = "device" in inspect.signature(predicate).parameters  # a predicate holding a table

    def mask_for(n: int, causal: bool, p: dict, device: str | torch.device = "cpu") -> MaskMod:
        return with_causal(predicate(n, p, device=device) if takes_device else predicate(n, p), causal)

    impls = [dense_impl(mask_for), sdpa_impl(mask_for), flex_impl(mask_for, name), *extra_impls]
    if native is not None:
        impls.append(with_decode(native, mask_for))
    return register(
        VariantSpec(
            name=name,
            family="sparse",
            summary=doc.strip().splitlines()[0],
            source=source,
            params=params,
            theory_fn=pattern_theory(exponent, note),
            impls={i.name: i for i in impls},
            decode=True,
            mask_fn=mask_for,
            row_counts_fn=row_counts,
            key_reads_fn=key_reads,
            index_fn=index,
            check_fn=check,
            padding=padding,
            padding_note=padding_note,
            memory=memory,
        )
    )


def rows(seq_len: int) -> torch.Tensor:
    """Query positions 0..n-1 as int64, for per-row pair formulas."""
    return torch.arange(seq_len, dtype=torch.long)
