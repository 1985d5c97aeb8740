"""Random attention (BigBird, Zaheer et al. 2020): each query attends to itself and r random keys.

Keys are drawn per query without replacement from [0, n), seeded and deterministic.
Claim: P ≈ n·(r+1), exponent 1 in n for fixed r.
"""

from __future__ import annotations

import functools

import torch

from variants.impls import native_impl, pattern_variant, rows
from variants.native.core import output
from variants.native.keys import random_keys, row_keys
from variants.rules import MemoryClaim, Param, named

KEYS = Param("keys", 32, "random keys r per query", minimum=0, maximum=lambda n: n)
SEED = Param("seed", 0, "seed of the draw", minimum=0)


@functools.lru_cache(maxsize=16)
def draw(n: int, keys: int, seed: int) -> torch.Tensor:
    """The (n, r) random keys of every query (cached: drawing is setup, not the timed call)."""
    return random_keys(n, keys, seed)


def table(n: int, keys: int, seed: int) -> torch.Tensor:
    """The pattern as an (n, n) bool lookup: O(n²), for the predicate only (dense, sdpa, flex)."""
    out = torch.zeros(n, n, dtype=torch.bool)
    out.scatter_(1, draw(n, keys, seed), True)
    out.fill_diagonal_(True)
    return out


def random_pattern(n: int, params: dict, device: str | torch.device = "cpu"):
    """The predicate reads an (n, n) table built on `device` here, in setup: a compiled kernel
    (flex on CUDA) must never copy it from the host inside the call."""
    r, seed = params["keys"], params["seed"]
    lookup = table(n, r, seed).to(device)

    def mask_mod(b, h, q_idx, kv_idx):
        return lookup[q_idx, kv_idx]

    return named(mask_mod, f"random({r}, seed={seed})")


def random_valid(n: int, idx: torch.Tensor, causal: bool) -> torch.Tensor:
    """Which drawn keys count: not the diagonal (counted once, apart), and j <= i when causal."""
    i = rows(n)[:, None]
    valid = idx != i
    return valid & (idx <= i) if causal else valid


def row_counts(n: int, causal: bool, params: dict) -> torch.Tensor:
    idx = draw(n, params["keys"], params["seed"])
    return random_valid(n, idx, causal).sum(dim=1) + 1


def key_reads(n: int, causal: bool, params: dict) -> int:
    """Each row gathers its own keys (no two rows share a draw, so nothing is read for two): the pairs."""
    return int(row_counts(n, causal, params).sum())


def plan(n: int, causal: bool, params: dict, like):
    idx = draw(n, params["keys"], params["seed"])
    diag = rows(n)[:, None]
    keys = torch.cat([diag, idx], dim=1)  # (n, r + 1): itself, then the draw
    valid = torch.cat([torch.ones_like(diag, dtype=torch.bool), random_valid(n, idx, causal)], dim=1)
    return row_keys(keys, valid, like)


SPEC = pattern_variant(
    name="random",
    doc=__doc__,
    source="Zaheer et al. 2020, BigBird (random attention)",
    memory=MemoryClaim(
        "Zaheer et al. 2020, Big Bird: memory linear in n for fixed random keys (its pairs), in training too"
    ),
    params=(KEYS, SEED),
    predicate=random_pattern,
    row_counts=row_counts,
    key_reads=key_reads,
    index=lambda params: params["keys"],  # the (n, r) draw
    exponent=lambda explicit: 1.0,
    native=native_impl(
        plan=plan,
        run=output,  # one part: its output as it is
        cost="O(n·r·d): scores sampled at r + 1 keys per query (CSR SDDMM, then SpMM)",
        gathers=True,
    ),
)
