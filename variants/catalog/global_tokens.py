"""Global tokens (Longformer, Beltagy et al. 2020): the first g tokens attend to and are seen by all.

Allowed: i < g or j < g or i == j. Claim: P ≈ 2ng − g² + n, exponent 1 in n for fixed g.
"""

from __future__ import annotations

import torch

from variants.impls import native_impl, pattern_variant, rows, tile_bounds
from variants.native.core import output
from variants.native.global_rows import GlobalKeys, GlobalRows
from variants.rules import MemoryClaim, Param, named

TOKENS = Param("tokens", 16, "global tokens g: the first g positions", minimum=0, maximum=lambda n: n)


def global_tokens(n: int, params: dict):
    g = params["tokens"]
    return named(lambda b, h, q_idx, kv_idx: (q_idx < g) | (kv_idx < g) | (q_idx == kv_idx), f"global({g})")


def row_counts(n: int, causal: bool, params: dict) -> torch.Tensor:
    i, g = rows(n), params["tokens"]
    global_row = i + 1 if causal else torch.full_like(i, n)
    return torch.where(i < g, global_row, torch.full_like(i, g + 1))


def key_reads(n: int, causal: bool, params: dict) -> int:
    """A tile [s, e) holding a global row (s < g) reads every key (causal: those before e); any other
    the g global keys and its own rows' keys."""
    s, e, g = *tile_bounds(n), params["tokens"]
    return int(torch.where(s < g, e if causal else torch.full_like(e, n), g + e - s).sum())


def run(q, k, v, plan: GlobalRows):
    """Rows i >= g score g global keys and themselves: O(n·g·d) (`GlobalKeys`, keys-first); rows
    i < g are full rows, computed apart and written over theirs (`GlobalRows`). Under autograd each
    set has its own backward (variants.native.core.part_grad)."""
    return output(q, k, v, plan)


def plan(n: int, causal: bool, params: dict, like) -> GlobalRows:
    """The pattern as key sets: rows i >= g take the g global keys and their own; rows i < g every key."""
    g = params["tokens"]
    return GlobalRows(GlobalKeys(g), g, causal)


SPEC = pattern_variant(
    name="global",
    doc=__doc__,
    source="Beltagy et al. 2020, Longformer (global attention)",
    memory=MemoryClaim(
        "Beltagy et al. 2020, Longformer: memory linear in n for fixed global tokens (its pairs), in training too"
    ),
    params=(TOKENS,),
    predicate=global_tokens,
    row_counts=row_counts,
    key_reads=key_reads,
    exponent=lambda explicit: 1.0,
    padding_note="is its own pattern on a prefix, but padding is not built for it: its native path needs every "
    "sequence to hold its g global tokens",
    native=native_impl(
        plan=plan,
        run=run,
        cost="O(n·g·d): g global keys per row, g full rows",
    ),
)
