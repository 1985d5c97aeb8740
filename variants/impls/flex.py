"""FlexAttention: a block mask built from the variant's predicate, compiled once per process and cached."""

from __future__ import annotations

import functools

import torch

from variants.impls.dense import REDUCED, MaskFor, pattern_mod, timed
from variants.rules import Impl, Prepared, Problem, padded, shifted


@functools.cache
def _compiled_flex(dynamic: bool = True):
    from torch.nn.attention.flex_attention import flex_attention

    from variants.impls.compiled import sweep_dynamo

    # NB: past dynamo's recompile limit (8) flex_attention silently falls back to an unfused eager
    # path that materializes n×n scores, which a benchmark would then time as "flex" (sweep_dynamo).
    sweep_dynamo()
    # Dynamic shapes: one kernel serves many n, as fast as static kernels and a fraction of a static
    # compile per later shape (docs/performance.md, "Figures behind the code's choices"). NB: changing
    # torch's thread count between compile and call is a guard failure and recompiles; the suite keeps
    # one thread count per process.
    return torch.compile(flex_attention, dynamic=dynamic)


_BLOCK_MASKS: dict = {}
_STATIC_ONLY: set[str] = set()  # variants whose mask failed to compile with dynamic shapes
# Above this many (query, key) pairs the block mask is built by a compiled create_block_mask. The eager one
# evaluates the mask_mod over every pair at once, its index arithmetic in int64: at long lengths that takes
# many times a compiled build's memory and time, past a GPU's memory; below it the eager build is quicker than
# a compile (docs/performance.md, "Figures behind the code's choices").
EAGER_MASK_PAIRS = 8192 * 8192


@functools.cache
def _compiled_create_block_mask():
    from torch.nn.attention.flex_attention import create_block_mask

    from variants.impls.compiled import sweep_dynamo

    sweep_dynamo()
    return torch.compile(create_block_mask)


def _block_mask(key, mask_mod, n_q: int, n_k: int, device, batch: int | None = None):
    """Block masks are cached by pattern: the same mask_mod object also keeps compiles cached. A
    padded batch's mask depends on the batch index (`batch` given)."""
    from torch.nn.attention.flex_attention import create_block_mask

    if key not in _BLOCK_MASKS:
        mask = None
        if n_q * n_k > EAGER_MASK_PAIRS:
            try:  # every variant's mask, causal and not, compiled to the eager one's blocks (checked at n = 640)
                mask = _compiled_create_block_mask()(mask_mod, batch, None, n_q, n_k, device=device)
            except Exception:  # noqa: BLE001 - a mask dynamo cannot trace is built eagerly: the same blocks
                mask = None
        if mask is None:
            mask = create_block_mask(mask_mod, batch, None, n_q, n_k, device=device)
        _BLOCK_MASKS[key] = mask
    return _BLOCK_MASKS[key]


def _flex_reasons(problem: Problem) -> list[str]:
    try:
        import torch.nn.attention.flex_attention  # noqa: F401
    except ImportError as err:  # pragma: no cover - depends on the torch build
        return [f"FlexAttention unavailable: {err}"]
    return []


def flex_impl(mask_for: MaskFor | None, name: str) -> Impl:
    """FlexAttention with a block mask built from the variant's predicate, compiled and cached."""

    def prepare(q, k, v, *, causal, params, lengths=None, warmup: bool = True):
        n_q, n_k = q.shape[-2], k.shape[-2]
        if lengths is not None:  # a padded batch: padding blocks are skipped, empty rows come out zero
            key = (name, n_q, causal, tuple(sorted(params.items())), str(q.device), lengths)
            mod = padded(pattern_mod(mask_for, n_k, causal, params, q.device), torch.tensor(lengths, device=q.device))
            block_mask, mask_s = timed(_block_mask, key, mod, n_q, n_k, q.device, len(lengths))
        elif mask_for is None and not causal:
            block_mask, mask_s = None, 0.0
        else:
            key = (name, n_q, n_k, causal, tuple(sorted(params.items())), str(q.device))
            mod = pattern_mod(mask_for, n_k, causal, params, q.device)
            mod = mod if n_q == n_k or mask_for is None else shifted(mod, n_k - n_q)  # queries: the last rows
            block_mask, mask_s = timed(_block_mask, key, mod, n_q, n_k, q.device)
        gqa = k.shape[1] != q.shape[1]
        notes = {"compile": "dynamic shapes"}
        flex = _compiled_flex(dynamic=name not in _STATIC_ONLY)

        def run():
            return flex(q, k, v, block_mask=block_mask, enable_gqa=gqa)

        setup = {"block_mask_s": mask_s}
        if warmup:  # compile here, outside the call that is timed
            try:
                _, setup["first_call_s"] = timed(run)
            except Exception as err:  # NB: inductor fails on some masks with dynamic shapes
                if name in _STATIC_ONLY or "Inductor" not in type(err).__name__ + str(type(err).__mro__):
                    raise
                _STATIC_ONLY.add(name)
                flex = _compiled_flex(dynamic=False)
                _, setup["first_call_s"] = timed(run)
        if name in _STATIC_ONLY:
            notes["compile"] = "static shapes (the dynamic-shape compile failed for this mask)"
        return Prepared(run, setup, notes)

    return Impl(
        "flex",
        prepare,
        cost="block-sparse: O(n²) for full, O(visited blocks · 128² · d) for a pattern",
        dtypes=REDUCED,  # NB: FlexAttention on CPU rejects float64 when it compiles
        extra_reasons=_flex_reasons,
        work="algorithm" if mask_for is None else "blocks",
        countable=False,  # NB: the counter raises under flex
        library="torch FlexAttention",
        padding="mask",
    )
