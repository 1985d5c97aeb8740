"""Global tokens (Longformer, Beltagy et al. 2020): the first g tokens attend to and are seen by all.

Allowed: i < g or j < g or i == j. Claim: P ≈ 2ng − g² + n, exponent 1 in n for fixed g.
"""

from __future__ import annotations

import torch

from variants.masks import named
from variants.global_rows import GlobalRows, OwnKey, full_rows
from variants.native import KeySubset, Union, grad_of, output, step_elements
from variants.pattern import native_impl, pattern_variant, rows
from variants.registry import Param

TOKENS = Param("tokens", 16, "global tokens g: the first g positions", minimum=0, maximum=lambda n: n)


def global_tokens(n: int, params: dict):
    g = params["tokens"]
    return named(lambda b, h, q_idx, kv_idx: (q_idx < g) | (kv_idx < g) | (q_idx == kv_idx), f"global({g})")


def row_counts(n: int, causal: bool, params: dict) -> torch.Tensor:
    i, g = rows(n), params["tokens"]
    global_row = i + 1 if causal else torch.full_like(i, n)
    return torch.where(i < g, global_row, torch.full_like(i, g + 1))


def run(q, k, v, plan, budget: int = 1 << 18):
    """Rows i >= g score g global keys and themselves: O(n·g·d); rows i < g are full rows.

    Rows go in chunks whose scores hold about `budget` elements (and a chunk at most
    `step_elements` with its copies), each written into the one output."""
    g, causal, sets = plan
    b, h, n, d = q.shape
    if grad_of(q, k, v):  # the same keys as disjoint sets, each with its own backward (variants.part_grad)
        return output(q, k, v, sets)
    out = torch.empty_like(q)
    per_row = b * h * (2 * (g + 1) + d)  # q·kgᵀ and the scores it is joined into, the rows' output
    chunk = max(1, min(budget // (b * h * (g + 1)), step_elements(q) // per_row))
    for start in range(0, n, chunk):
        rows = slice(start, min(start + chunk, n))
        out[:, :, rows] = attend(q[:, :, rows], k[:, :, rows], v[:, :, rows], g, k[:, :, :g], v[:, :, :g])
    # Rows i < g see every key (their own key is among the global ones): computed apart.
    out[:, :, :g] = full_rows(q, k, v, rows=g, causal=causal)
    return out


def plan(n: int, causal: bool, params: dict, like):
    """g, causal, and the pattern as key sets for autograd: rows i >= g take the g global keys and
    their own; rows i < g every key."""
    g = params["tokens"]
    globals_ = KeySubset(torch.arange(g, device=like.device), torch.ones(n, g, dtype=torch.bool, device=like.device))
    return g, causal, GlobalRows(Union((globals_, OwnKey())), g, causal)


def attend(q, k, v, g: int, kg=None, vg=None):
    """Each row against the g global keys kg, vg (the first g of k, v by default) and its own key."""
    kg, vg = (k[:, :, :g] if kg is None else kg), (v[:, :, :g] if vg is None else vg)
    own = (q * k).sum(-1, keepdim=True)  # q_i·k_i; NB: einsum held no product but was 4x slower
    scores = torch.cat([q @ kg.transpose(-1, -2), own], dim=-1)  # (B, H, rows, g + 1)
    probs = torch.softmax(scores.mul_(q.shape[-1] ** -0.5), dim=-1, out=scores)  # NB: no autograd here (`run`)
    return (probs[..., :g] @ vg).addcmul_(probs[..., g:], v)  # (B, H, rows, d)


SPEC = pattern_variant(
    name="global",
    doc=__doc__,
    source="Beltagy et al. 2020, Longformer (global attention)",
    params=(TOKENS,),
    predicate=global_tokens,
    row_counts=row_counts,
    exponent=lambda explicit: 1.0,
    padding_note="is its own pattern on a prefix, but padding is not built for it: its native path needs every "
                 "sequence to hold its g global tokens",
    native=native_impl(
        plan=plan,
        run=run,
        cost="O(n·g·d): g global keys per row, g full rows",
    ),
)
