"""torch's fused attention kernel for the CPU, where a native path's parts can use it.

`aten._scaled_dot_product_flash_attention_for_cpu` is what SDPA calls on the CPU: scores, softmax
and P·V in tiles, with its own fast exponential, on views of any strides (the last dim contiguous),
with an additive mask, returning the log-sum-exp that a fold needs. The native forwards call it
with each block or class as one of its "heads": a band's run of blocks against overlapping K/V
windows read in place (variants.native.band), neighborhood's interior, strided's residue classes, a key
subset (variants.native). Other devices, and torches without it, take the parts' steps of matmuls
and a softmax.
"""

from __future__ import annotations

import torch

FUSED = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)


def fused(x: torch.Tensor) -> bool:
    """Whether x's device has the fused kernel (the CPU, with a torch that has it)."""
    return FUSED is not None and x.device.type == "cpu"


def fused_attention(q, k, v, mask: torch.Tensor, scale: float, empty: torch.Tensor | None = None):
    """The fused kernel on (B, H, L, d) views (the last dim contiguous), `mask` added to the scores:
    (out (B, H, L, d), lse (B, H, L)). NB: the kernel gives a row with no allowed key 0 with lse 0;
    `empty` (those rows, broadcast to the lse: `empty_rows` of the mask, made in setup) gets −inf,
    so that a fold gives them no weight."""
    out, lse = FUSED(q, k, v, attn_mask=mask, scale=scale)
    return out, (lse if empty is None else lse.masked_fill_(empty, float("-inf")))


def additive(allowed: torch.Tensor, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The additive mask of a boolean one: 0 where allowed, −inf elsewhere (same shape and device)."""
    return torch.zeros(allowed.shape, dtype=dtype, device=allowed.device).masked_fill_(~allowed, float("-inf"))


def empty_rows(mask: torch.Tensor) -> torch.Tensor | None:
    """(…, L): where a row of an additive mask (…, L, S) allows no key, or None if none does."""
    empty = torch.isneginf(mask).all(-1)
    return empty if bool(empty.any()) else None
