"""Mask predicates in FlexAttention's form, their combinators, and pictures of them.

A predicate takes (b, h, q_idx, kv_idx) tensors and returns a bool tensor; the same predicate
builds the dense reference mask (by broadcasting) and the FlexAttention block mask (by vmap).
"""

from __future__ import annotations

from typing import Callable

import torch

MaskMod = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def named(fn: MaskMod, name: str) -> MaskMod:
    fn.__name__ = name
    return fn


def and_masks(*mods: MaskMod) -> MaskMod:
    def mask_mod(b, h, q_idx, kv_idx):
        out = mods[0](b, h, q_idx, kv_idx)
        for mod in mods[1:]:
            out = out & mod(b, h, q_idx, kv_idx)
        return out

    return named(mask_mod, " & ".join(m.__name__ for m in mods))


def or_masks(*mods: MaskMod) -> MaskMod:
    def mask_mod(b, h, q_idx, kv_idx):
        out = mods[0](b, h, q_idx, kv_idx)
        for mod in mods[1:]:
            out = out | mod(b, h, q_idx, kv_idx)
        return out

    return named(mask_mod, " | ".join(m.__name__ for m in mods))


def causal_mod(b, h, q_idx, kv_idx):
    return kv_idx <= q_idx


def with_causal(mod: MaskMod, causal: bool) -> MaskMod:
    """docs/CLAIMS.md: causal always additionally requires j <= i."""
    return and_masks(mod, causal_mod) if causal else mod


def dense_mask(
    mod: MaskMod, seq_len: int, *, device: str | torch.device = "cpu", rows: int | None = None
) -> torch.Tensor:
    """Evaluate a predicate on every (i, j): a (n, n) bool tensor, O(n²) by construction; with `rows`,
    only the last rows (queries at the end: a decode step), (rows, n)."""
    i = torch.arange(seq_len, device=device)
    first = seq_len - (seq_len if rows is None else rows)
    zero = torch.zeros((), dtype=torch.long, device=device)
    out = mod(zero, zero, i[first:, None], i[None, :])
    return out.expand(seq_len - first, seq_len).to(torch.bool)


def shifted(mod: MaskMod, offset: int) -> MaskMod:
    """The predicate for queries that are the last rows: query q_idx sits at position q_idx + offset."""

    def mask_mod(b, h, q_idx, kv_idx):
        return mod(b, h, q_idx + offset, kv_idx)

    return named(mask_mod, f"{getattr(mod, '__name__', 'mask')} from row {offset}")


def padded(mod: MaskMod, lengths: torch.Tensor, dummy: bool = False) -> MaskMod:
    """Padding: sequence b has lengths[b] valid tokens, then padding; a pair needs a valid query and a
    valid key besides `mod`. With `dummy`, a padding query row reads key 0, so that no row is empty
    (no NaN in a dense softmax or its gradient; the caller zeroes those rows)."""

    def mask_mod(b, h, q_idx, kv_idx):
        length = lengths[b]
        ok = mod(b, h, q_idx, kv_idx) & (q_idx < length) & (kv_idx < length)
        return ok | ((q_idx >= length) & (kv_idx == 0)) if dummy else ok

    return named(mask_mod, f"{getattr(mod, '__name__', 'mask')} & valid")


def everything(b, h, q_idx, kv_idx):
    return q_idx >= 0


def dense_batch_mask(mod: MaskMod, batch: int, seq_len: int, *, device: str | torch.device = "cpu") -> torch.Tensor:
    """A predicate that depends on the batch index, on every (b, i, j): a (B, 1, n, n) bool tensor."""
    i = torch.arange(seq_len, device=device)
    b = torch.arange(batch, device=device)[:, None, None]
    zero = torch.zeros((), dtype=torch.long, device=device)
    out = mod(b, zero, i[None, :, None], i[None, None, :])
    return out.expand(batch, seq_len, seq_len).to(torch.bool)[:, None]


def show(mask: torch.Tensor, max_size: int = 48) -> str:
    """A text picture of a mask (every mask can show itself), subsampled past `max_size`."""
    n = mask.shape[0]
    step = max(1, -(-n // max_size))
    rows = []
    for i in range(0, n, step):
        block = mask[i : i + step]
        rows.append("".join("█" if block[:, j : j + step].any() else "·" for j in range(0, n, step)))
    return "\n".join(rows)


def causal_clip(lo: torch.Tensor, hi: torch.Tensor, i: torch.Tensor, causal: bool) -> torch.Tensor:
    """Size of the key interval [lo, hi] per row, clipped to j <= i when causal."""
    if causal:
        hi = torch.minimum(hi, i)
    return (hi - lo + 1).clamp(min=0)
