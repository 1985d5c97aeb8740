"""torch's scaled_dot_product_attention: the fused kernel (a pattern as a dense boolean mask), and
over nested (jagged) tensors for padded batches."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from variants.impls.dense import MaskFor, padding_mask, timed
from variants.rules import Impl, Prepared, dense_mask


def sdpa_kernel_chosen(q, k, v, mask=None, causal: bool = False, gqa: bool = False) -> str:
    """The backend SDPA's dispatcher picks for these inputs (flash, efficient, cudnn, math), asked
    the way the call asks. NB: torch._fused_sdp_choice is private; when it is missing, say so."""
    from torch.nn.attention import SDPBackend

    try:
        choice = torch._fused_sdp_choice(q, k, v, attn_mask=mask, is_causal=causal, enable_gqa=gqa)
        return SDPBackend(choice).name.lower()
    except Exception as err:  # noqa: BLE001 - a note, never a failure
        return f"unknown ({type(err).__name__})"


def sdpa_impl(mask_for: MaskFor | None) -> Impl:
    """torch's fused kernel; a sparse pattern goes in as a dense boolean mask (O(n²))."""

    def prepare(q, k, v, *, causal, params, lengths=None):
        gqa = k.shape[1] != q.shape[1]
        if lengths is not None:  # a padded batch: a (B, 1, n, n) mask, the fused kernel pays for every pair
            (mask, rows), mask_s = timed(padding_mask, mask_for, q, causal, params, lengths)
            return Prepared(
                lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa).masked_fill(~rows, 0.0),
                {"mask_s": mask_s},
                {"kernel": sdpa_kernel_chosen(q, k, v, mask=mask, gqa=gqa)},
            )
        if mask_for is None:
            return Prepared(
                lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa),
                notes={"kernel": sdpa_kernel_chosen(q, k, v, causal=causal, gqa=gqa)},
            )
        mod = mask_for(k.shape[-2], causal, params, device=q.device)
        mask, mask_s = timed(dense_mask, mod, k.shape[-2], device=q.device, rows=q.shape[-2])
        return Prepared(
            lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa),
            {"mask_s": mask_s},
            {"kernel": sdpa_kernel_chosen(q, k, v, mask=mask, gqa=gqa)},
        )

    cost = (
        "O(n²) time; full: fused kernel, no n×n scores"
        if mask_for is None
        else ("O(n²) time and memory: the pattern is a dense n×n boolean mask")
    )
    return Impl(
        "sdpa",
        prepare,
        cost=cost,
        work="algorithm" if mask_for is None else "all_pairs",
        library="torch scaled_dot_product_attention",
        padding="mask",
    )


def jagged(t: torch.Tensor, lengths) -> torch.Tensor:
    """(B, H, n, d) padded -> a nested (B, H, j, d) tensor of each sequence's valid prefix (a copy)."""
    import warnings

    with warnings.catch_warnings():  # NB: the jagged layout is a prototype and says so on every call
        warnings.simplefilter("ignore", UserWarning)
        parts = [t[b, :, :n].transpose(0, 1) for b, n in enumerate(lengths)]  # (l_b, H, d) each
        return torch.nested.as_nested_tensor(parts, layout=torch.jagged).transpose(1, 2)  # NB: keeps autograd


def nested_impl() -> Impl:
    """SDPA over nested (jagged) tensors: the packed variable-length form a library takes itself.
    The output comes back padded with zeros, inside the timed call."""

    def prepare(q, k, v, *, causal, params, lengths=None):
        b, h, n, d = q.shape
        (qn, kn, vn), pack_s = timed(lambda: [jagged(t, lengths or (t.shape[-2],) * b) for t in (q, k, v)])

        def run():
            out = F.scaled_dot_product_attention(qn, kn, vn)  # (B, H, j, d) nested
            return out.transpose(1, 2).to_padded_tensor(0.0, output_size=(b, n, h, d)).transpose(1, 2)

        return Prepared(run, {"pack_s": pack_s})

    return Impl(
        "sdpa-nested",
        prepare,
        cost="O(Σ lᵢ²·d): one call over the valid tokens, no padding computed",
        supports_causal=False,  # NB: torch's nested SDPA refuses is_causal (torch 2.13)
        library="torch scaled_dot_product_attention (nested jagged tensors)",
        padding="mask",
        countable=False,
    )
