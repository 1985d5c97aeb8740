"""Neighborhood attention (Hassani et al. 2023, NATTEN): each query attends to exactly K keys.

In the interior the window is the sliding window's, |i − j| ≤ K//2; at the borders it does not
shrink but shifts: keys [s_i, s_i + K) with s_i = clamp(i − K//2, 0, n − K). So every row has K keys,
where `sliding_window` has K//2 + 1 at the edges. Claim: P = n·K pairs, exponent 1 in n for a fixed K.
Causal adds j ≤ i, as for every pattern here (NATTEN's own causal window is the K keys up to i).
"""

from __future__ import annotations

import torch

from variants.impls import REDUCED, native_impl, pattern_variant, peer, range_reads, rows, tile_bounds
from variants.native.band import KeyRanges, key_ranges
from variants.native.core import output
from variants.rules import Differs, MemoryClaim, Param, named


def largest_odd(n: int) -> int:
    return n if n % 2 else max(1, n - 1)


KERNEL = Param("kernel", 257, "keys per query K (odd, at most n)", minimum=1, maximum=largest_odd)


def check(n: int, params: dict) -> None:
    if params["kernel"] % 2 == 0:
        raise ValueError(
            f"neighborhood: parameter kernel={params['kernel']} (allowed: an odd number <= {largest_odd(n)})"
        )


def starts(i, n: int, kernel: int):
    return (i - kernel // 2).clamp(0, n - kernel)


def window(n: int, params: dict):
    k = params["kernel"]
    return named(
        lambda b, h, q_idx, kv_idx: (kv_idx >= starts(q_idx, n, k)) & (kv_idx < starts(q_idx, n, k) + k),
        f"neighborhood({k})",
    )


def bounds(n: int, kernel: int, causal: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's keys [lo, hi): (n,) each, both non-decreasing in i."""
    i = rows(n)
    lo = starts(i, n, kernel)
    hi = lo + kernel
    return lo, (torch.minimum(hi, i + 1) if causal else hi)


def row_counts(n: int, causal: bool, params: dict) -> torch.Tensor:
    lo, hi = bounds(n, params["kernel"], causal)
    return hi - lo


def key_reads(n: int, causal: bool, params: dict) -> int:
    """A tile [s, e) reads its rows' windows: [lo_s, hi_(e−1)), no gap (both ends non-decreasing, each
    row's window holding its own key)."""
    lo, hi = bounds(n, params["kernel"], causal)
    s, e = tile_bounds(n)
    return range_reads(lo[s], hi[e - 1])


def plan(n: int, causal: bool, params: dict, like: torch.Tensor, block: int = 128) -> KeyRanges:
    """Blocks of queries against the key range their rows' windows reach (variants.native.band)."""
    lo, hi = bounds(n, params["kernel"], causal)
    return key_ranges(lo, hi, like, block)


def natten_call(q, k, v, causal, params):
    """NATTEN's na1d on heads-last tensors; on CPU its flex backend runs uncompiled."""
    import natten

    qh, kh, vh = (t.transpose(1, 2) for t in (q, k, v))  # (B, n, H, d)
    return lambda: natten.na1d(qh, kh, vh, kernel_size=params["kernel"]).transpose(1, 2)


SPEC = pattern_variant(
    name="neighborhood",
    doc=__doc__,
    source="Hassani et al. 2023, Neighborhood Attention Transformer",
    memory=MemoryClaim("Hassani et al. 2023, NAT: memory linear in n for a fixed kernel (its pairs), in training too"),
    params=(KERNEL,),
    predicate=window,
    row_counts=row_counts,
    key_reads=key_reads,
    exponent=lambda explicit: 1.0,
    native=native_impl(plan=plan, run=output, cost="O(n·(K + 128)·d): blocks of 128 queries against their key range"),
    extra_impls=(
        peer(
            "natten",
            "natten",
            natten_call,
            supports_causal=False,
            dtypes=REDUCED,
            install="pip install --no-build-isolation natten: it builds against the installed torch",
            cost="NATTEN's fused kernels on CUDA; on CPU its flex backend, uncompiled",
            differs=Differs(
                "NATTEN's causal window is the K keys up to i, not this pattern with j ≤ i: "
                "only its non-causal form is measured"
            ),
        ),
    ),
    check=check,
)
