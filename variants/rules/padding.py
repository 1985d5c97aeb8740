"""Padded batches: sequences of different valid lengths, padded to one length n.

The valid lengths a case gets (seeded), their check, and the packed form: each sequence's valid prefix prepared as its own call, padding rows zero. Implementations
with a key-padding mask (dense, SDPA, FlexAttention) take the lengths themselves (`variants.impls`).
"""

from __future__ import annotations

import dataclasses

import torch

from variants.rules.spec import Prepared
from variants.rules.theory import Theory

SPREAD = 0.5  # valid lengths spread ±50% about their mean, where the padded length leaves room


def valid_lengths(batch: int, seq_len: int, fraction: float, seed: int = 0) -> tuple[int, ...]:
    """The valid tokens of each sequence of a padded batch: a mean of fraction·n, spread evenly over
    ±SPREAD of it (less where the padded length n leaves less room), in a seeded order, each ≥ 1.

    For fraction ≤ 1/(1 + SPREAD) every length is proportional to the fraction, so the valid pairs of
    an O(n^p) variant grow as (valid tokens)^p exactly as the fraction grows."""
    if not 0 < fraction <= 1:
        raise ValueError(f"valid_fraction={fraction!r} (allowed: 0 < valid_fraction <= 1)")
    spread = min(SPREAD, (1 - fraction) / fraction)
    quantiles = [(i + 0.5) / batch for i in range(batch)]  # evenly spaced in (0, 1)
    order = torch.randperm(batch, generator=torch.Generator().manual_seed(seed)).tolist()
    return tuple(max(1, min(seq_len, round(seq_len * fraction * (1 + spread * (2 * quantiles[i] - 1))))) for i in order)


def check_lengths(lengths, q, k) -> None:
    """A padded batch: one valid length per sequence, each in 1..n, self-attention only."""
    b, n = q.shape[0], q.shape[-2]
    if k.shape[-2] != n:
        raise ValueError(f"lengths with q seq_len={n}, k seq_len={k.shape[-2]} (allowed: padding of self-attention)")
    if len(lengths) != b or any(isinstance(x, bool) or not isinstance(x, int) or not 1 <= x <= n for x in lengths):
        raise ValueError(f"lengths={list(lengths)} (allowed: {b} ints, one per sequence, each in 1..{n})")


def prepare(implementation, q, k, v, *, causal: bool, params: dict, lengths=None) -> Prepared:
    """The implementation's closure: as it is, or over a padded batch as its trait says (a mask, or packed)."""
    if lengths is None:
        return implementation.prepare(q, k, v, causal=causal, params=params)
    if implementation.padding == "mask":
        return implementation.prepare(q, k, v, causal=causal, params=params, lengths=tuple(lengths))
    return packed(implementation, q, k, v, causal=causal, params=params, lengths=tuple(lengths))


def packed(implementation, q, k, v, *, causal: bool, params: dict, lengths) -> Prepared:
    """Each sequence's valid prefix prepared as its own problem (setup, not timed); the timed call
    runs them one after another into a zero output, so padding rows are zero and cost nothing."""
    parts = [
        implementation.prepare(
            q[b : b + 1, :, :n], k[b : b + 1, :, :n], v[b : b + 1, :, :n], causal=causal, params=params
        )
        for b, n in enumerate(lengths)
    ]
    setup: dict[str, float] = {}
    for part in parts:
        for name, seconds in part.setup_s.items():
            setup[name] = setup.get(name, 0.0) + seconds

    def run():
        out = q.new_zeros(q.shape)  # (B, H, n, d)
        for b, (n, part) in enumerate(zip(lengths, parts)):
            out[b : b + 1, :, :n] = part()
        return out

    return Prepared(run, setup, {**parts[0].notes, "padding": "packed: one call per sequence"})


def check_theory(spec, lengths, batch: int, seq_len: int, *, cross: bool, mode: str) -> None:
    if not spec.padding:
        raise ValueError(f"valid_fraction: {spec.name} {spec.padding_note}")
    if cross or mode == "decode":
        raise ValueError(
            f"valid lengths with {'kv_len' if cross else 'mode=decode'} (allowed: padding of "
            "self-attention, fwd or fwd_bwd)"
        )
    if len(lengths) != batch or not all(1 <= n <= seq_len for n in lengths):
        raise ValueError(f"lengths={list(lengths)} (allowed: {batch} ints, one per sequence, each in 1..{seq_len})")


def summed(padded: Theory, parts: list[Theory]) -> Theory:
    """A padded batch's theory: its sequences' work and bytes summed (each at its valid length); K/V
    bytes and the claims those of the padded batch."""
    extra = {name: sum(p.extra_flops.get(name, 0) for p in parts) for name in padded.extra_flops}
    pairs = None if padded.pairs is None else sum(p.pairs for p in parts)
    moved = {
        name: None if getattr(padded, name) is None else sum(getattr(p, name) for p in parts)
        for name in ("compulsory_bytes", "traffic_bytes", "fixed_bytes")
    }
    return dataclasses.replace(padded, flops=sum(p.flops for p in parts), pairs=pairs, extra_flops=extra, **moved)
