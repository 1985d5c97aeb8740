"""BigBird (Zaheer et al. 2020): the union of a sliding window, global tokens and random keys.

Claim: P ≈ n·(2w+1) + 2ng − g² + n·r, exponent 1 in n for fixed w, g, r.
"""

from __future__ import annotations

import torch

from variants.catalog.global_tokens import TOKENS, global_tokens
from variants.catalog.random_keys import KEYS, SEED, draw, random_pattern
from variants.catalog.sliding_window import window
from variants.impls import native_impl, pattern_variant, rows, tile_bounds
from variants.native.band import band_plan
from variants.native.core import Union, output
from variants.native.global_rows import GlobalRows
from variants.native.keys import KeySubset, row_keys
from variants.rules import MemoryClaim, Param, or_masks

WINDOW = Param("window", 64, "one-sided reach w of the window", minimum=0)


def bigbird(n: int, params: dict, device: str | torch.device = "cpu"):
    return or_masks(window(n, params), global_tokens(n, params), random_pattern(n, params, device))


def extra_sets(n: int, causal: bool, params: dict):
    """Global and random keys not already in the window (the window holds the diagonal)."""
    i = rows(n)[:, None]
    w, g = params["window"], params["tokens"]
    globals_ = torch.arange(g)[None, :]
    global_valid = (i - globals_) > w  # j < g <= i for rows that are not global, so only j < i − w
    if causal:
        global_valid = global_valid & (globals_ <= i)
    idx = draw(n, params["keys"], params["seed"])
    random_valid = ((idx - i).abs() > w) & (idx >= g)
    if causal:
        random_valid = random_valid & (idx <= i)
    return global_valid, idx, random_valid


def row_counts(n: int, causal: bool, params: dict) -> torch.Tensor:
    i, w, g = rows(n), params["window"], params["tokens"]
    band = torch.minimum(i + w if not causal else i, torch.full_like(i, n - 1)) - (i - w).clamp(min=0) + 1
    global_valid, _, random_valid = extra_sets(n, causal, params)
    others = band + global_valid.sum(1) + random_valid.sum(1)
    global_row = i + 1 if causal else torch.full_like(i, n)
    return torch.where(i < g, global_row, others)


def key_reads(n: int, causal: bool, params: dict) -> int:
    """The window and the global tokens by tiles: a tile holding a global row (s < g) reads every key
    (causal: those before e), any other its window [s − w, e + w) (causal [s − w, e)) and the global
    keys below it; then each row i >= g gathers its drawn keys outside both (a draw is its row's own)."""
    s, e, w, g = *tile_bounds(n), params["window"], params["tokens"]
    lo, hi = (s - w).clamp(min=0), e if causal else (e + w).clamp(max=n)
    tiled = torch.where(s < g, e if causal else torch.full_like(e, n), hi - lo + lo.clamp(max=g))
    _, _, random_valid = extra_sets(n, causal, params)
    return int(tiled.sum()) + int(random_valid[g:].sum())


def plan(n: int, causal: bool, params: dict, like):
    global_valid, idx, random_valid = extra_sets(n, causal, params)
    g = params["tokens"]
    sets = (
        band_plan(n, params["window"], causal, like),
        KeySubset(torch.arange(g, device=like.device), global_valid.to(like.device)),
        row_keys(idx, random_valid, like),
    )
    return GlobalRows(Union(sets), g, causal)  # the window, the global keys, the random keys; rows i < g see all


SPEC = pattern_variant(
    name="bigbird",
    doc=__doc__,
    source="Zaheer et al. 2020, Big Bird: Transformers for Longer Sequences",
    memory=MemoryClaim("Zaheer et al. 2020, Big Bird: memory linear in n (its pairs), in training too"),
    params=(WINDOW, TOKENS, KEYS, SEED),
    predicate=bigbird,
    row_counts=row_counts,
    key_reads=key_reads,
    index=lambda params: params["keys"],  # the (n, r) draw
    exponent=lambda explicit: 1.0,
    native=native_impl(
        plan=plan, run=output, cost="O(n·(w + g + r)·d): a band, global keys, sampled random keys", gathers=True
    ),
)
