"""The dense reference: softmax(QKᵀ/√d + mask)V with the n×n scores materialized, and what the
masked library forms share (a pattern's predicate, a padded batch's mask, a timed setup step).

Each `*_impl` returns an `Impl` whose `prepare` does all setup (mask, block mask, compile) and
returns the zero-argument closure that is timed, with its setup costs beside it.
"""

from __future__ import annotations

import time
from typing import Callable

import torch

from variants.rules import Impl, MaskMod, Prepared, causal_mod, dense_batch_mask, dense_mask, everything, padded

REDUCED = (torch.float16, torch.bfloat16, torch.float32)


def repeat_kv(k: torch.Tensor, num_heads: int) -> torch.Tensor:
    """(B, H_kv, n, d) -> (B, H, n, d): query head h reads KV head floor(h·H_kv/H)."""
    return k if k.shape[1] == num_heads else k.repeat_interleave(num_heads // k.shape[1], dim=1)


def dense_attention(q, k, v, mask: torch.Tensor | None = None, causal: bool = False) -> torch.Tensor:
    """softmax(QKᵀ/√d + mask)V with the (n_q, n_k) scores materialized: the O(n²) reference."""
    k, v = repeat_kv(k, q.shape[1]), repeat_kv(v, q.shape[1])
    scores = (q @ k.transpose(-1, -2)).mul_(q.shape[-1] ** -0.5)  # (B, H, n_q, n_k)
    if causal:
        n_q, n_k = scores.shape[-2:]
        mask = torch.ones(n_q, n_k, dtype=torch.bool, device=q.device).tril(n_k - n_q)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return scores.softmax(dim=-1) @ v  # (B, H, n_q, d)


def timed(fn: Callable, *args, **kwargs):
    """(result, seconds); NB: waits for queued CUDA work, so a setup time is the work's, not its launch."""
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()
    return out, time.perf_counter() - start


MaskFor = Callable[..., MaskMod]  # (n, causal, params, device=...) -> predicate


def pattern_mod(mask_for: MaskFor | None, n: int, causal: bool, params: dict, device) -> MaskMod:
    if mask_for is None:
        return causal_mod if causal else everything
    return mask_for(n, causal, params, device=device)


def padding_mask(mask_for: MaskFor | None, q, causal: bool, params: dict, lengths) -> tuple[torch.Tensor, torch.Tensor]:
    """A padded batch's (B, 1, n, n) mask, the pattern and a valid query and key (a padding row reads
    key 0: no empty row), and the (B, 1, n, 1) valid rows, whose complement the caller zeroes."""
    b, n = q.shape[0], q.shape[-2]
    valid = torch.tensor(lengths, device=q.device)
    mod = padded(pattern_mod(mask_for, n, causal, params, q.device), valid, dummy=True)
    rows = (torch.arange(n, device=q.device) < valid[:, None])[:, None, :, None]
    return dense_batch_mask(mod, b, n, device=q.device), rows


def dense_impl(mask_for: MaskFor | None) -> Impl:
    """The masked reference; `mask_for=None` means full attention (causal via tril)."""

    def prepare(q, k, v, *, causal, params, lengths=None):
        if lengths is not None:  # a padded batch: every B·n² score, padding masked out
            (mask, rows), mask_s = timed(padding_mask, mask_for, q, causal, params, lengths)
            return Prepared(lambda: dense_attention(q, k, v, mask=mask).masked_fill(~rows, 0.0), {"mask_s": mask_s})
        if mask_for is None:
            return Prepared(lambda: dense_attention(q, k, v, causal=causal))
        mod = mask_for(k.shape[-2], causal, params, device=q.device)  # queries are the last rows (decode)
        mask, mask_s = timed(dense_mask, mod, k.shape[-2], device=q.device, rows=q.shape[-2])
        return Prepared(lambda: dense_attention(q, k, v, mask=mask), {"mask_s": mask_s})

    return Impl(
        "dense",
        prepare,
        cost="O(n²) time and memory: materializes the n×n scores",
        work="algorithm" if mask_for is None else "all_pairs",
        padding="mask",
    )
