"""Global tokens (Longformer, Beltagy et al. 2020): the first g tokens attend to and are seen by all.

Allowed: i < g or j < g or i == j. Claim: P ≈ 2ng − g² + n, exponent 1 in n for fixed g.
"""

from __future__ import annotations

import torch

from variants.rules import Param, named
from variants.native.global_rows import GlobalRows, OwnKey, full_rows
from variants.native.core import Union, cache_elements, grad_of, output, step_elements
from variants.native.keys import KeySubset
from variants.impls import native_impl, pattern_variant, range_reads, rows, tile_bounds

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


def run(q, k, v, plan, budget: int = 1 << 18):
    """Rows i >= g score g global keys and themselves: O(n·g·d); rows i < g are full rows.

    Rows go in chunks whose scores hold about `budget` elements (and a chunk at most
    `step_elements` with its copies), each written into the one output."""
    g, causal, sets = plan
    b, h, n, d = q.shape
    if grad_of(q, k, v):  # the same keys as disjoint sets, each with its own backward (variants.native.core.part_grad)
        return output(q, k, v, sets)
    out = q.new_empty(q.shape)  # contiguous, so out3 is a view of it
    q3, k3, v3, out3 = (x.reshape(b * h, n, d) for x in (q, k, v, out))
    per_row = b * h * (2 * (g + 1) + d)  # kg·qᵀ and its softmax, the rows' output
    chunk = max(1, min(cache_elements(q, budget) // (b * h * (g + 1)), step_elements(q) // per_row))
    for start in range(0, n, chunk):
        rows = slice(start, min(start + chunk, n))
        attend(q3[:, rows], k3[:, rows], v3[:, rows], k3[:, :g], v3[:, :g], out=out3[:, rows])
    # Rows i < g see every key (their own key is among the global ones): computed apart.
    out[:, :, :g] = full_rows(q, k, v, rows=g, causal=causal)
    return out


def plan(n: int, causal: bool, params: dict, like):
    """g, causal, and the pattern as key sets for autograd: rows i >= g take the g global keys and
    their own; rows i < g every key."""
    g = params["tokens"]
    globals_ = KeySubset(torch.arange(g, device=like.device), torch.ones(n, g, dtype=torch.bool, device=like.device))
    return g, causal, GlobalRows(Union((globals_, OwnKey())), g, causal)


def attend(q, k, v, kg, vg, out):
    """Rows (BH, rows, d) against the g global keys kg, vg (BH, g, d) and each its own key, into
    `out` (BH, rows, d).

    The scores are laid out keys-first, (BH, g + 1, rows), and the softmax runs over dim 1: along
    the rows it is vectorized, where a softmax over a last dim of 17 cost 15.9 ms of a 65.8 ms call
    (n = 32768, H = 8: torch's CPU kernel pays per row, and twice that in place when the width is
    not a multiple of 16); kg·qᵀ and pᵀ·vg are the same GEMMs as q·kgᵀ and p·vg."""
    bh, rows, d = q.shape
    g = kg.shape[1]
    scores = q.new_empty(bh, g + 1, rows)
    torch.bmm(kg, q.transpose(1, 2), out=scores[:, :g])
    torch.linalg.vecdot(q, k, out=scores[:, g])  # q_i·k_i
    probs = torch.softmax(scores.mul_(d**-0.5), dim=1)  # NB: no autograd here (`run`)
    torch.bmm(probs[:, :g].transpose(1, 2), vg, out=out)
    return out.addcmul_(probs[:, g, :, None], v)  # (BH, rows, d)


SPEC = pattern_variant(
    name="global",
    doc=__doc__,
    source="Beltagy et al. 2020, Longformer (global attention)",
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
