"""Helpers shared by the registry-driven tests: cases are enumerated from the registry itself."""

from __future__ import annotations

import os

import torch

# The `triton` paths run under Triton's interpreter on a machine without a GPU (variants.triton): set
# before anything imports triton. With a GPU they run compiled, as they are timed.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import variants  # noqa: E402

SKIP_IN_SWEEP = {"flex", "xformers"}  # compiled / CUDA-only: covered by their own tests


def kv_heads_for(spec, heads: int) -> int:
    if spec.kv_heads == "one":
        return 1
    if spec.kv_heads == "divides":
        return max(d for d in range(1, heads) if heads % d == 0) if heads > 1 else 1
    return heads


def inputs(spec, *, batch=2, heads=4, seq_len=37, head_dim=8, dtype=torch.float64, seed=0, kv_heads=None):
    gen = torch.Generator().manual_seed(seed)
    kv = kv_heads_for(spec, heads) if kv_heads is None else kv_heads
    q = torch.randn(batch, heads, seq_len, head_dim, generator=gen, dtype=dtype)
    k = torch.randn(batch, kv, seq_len, head_dim, generator=gen, dtype=dtype)
    v = torch.randn(batch, kv, seq_len, head_dim, generator=gen, dtype=dtype)
    return q, k, v


def all_impls(exclude=frozenset()):
    """Every (variant, impl) that computes the variant's own definition (peers apart: `peer_impls`)."""
    return [(name, impl) for name in variants.names() for impl, i in variants.get(name).impls.items()
            if impl != "dense" and impl not in exclude and i.differs is None]


def peer_impls():
    """Library implementations whose definition differs from the variant's (checked where they coincide)."""
    return [(name, impl) for name in variants.names() for impl, i in variants.get(name).impls.items()
            if i.differs is not None]


def causal_unsupported(spec, impl: str, causal: bool, params=None) -> bool:
    """The implementation refuses this form (linformer's causal, rfa's gate without causal)."""
    return bool(spec.reasons(impl, params or {}, causal=causal, dtype=torch.float64))


def patterns():
    return [name for name in variants.names() if variants.get(name).mask_fn is not None]


def theory(spec, **kw):
    """spec.theory with the KV heads a gqa case needs (pairs and FLOPs do not depend on them)."""
    if spec.kv_heads == "divides" and "num_kv_heads" not in kw:
        kw["num_kv_heads"] = 2
    return spec.theory(**kw)
