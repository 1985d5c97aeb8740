"""Implementations shared by many variants: the dense reference, SDPA, FlexAttention, xformers.

Each `*_impl` returns an `Impl` whose `prepare` does all setup (mask, block mask, compile) and
returns the zero-argument closure that is timed, with its setup costs beside it.
"""

from __future__ import annotations

import functools
import logging
import time
from typing import Callable

import torch
import torch.nn.functional as F

from variants.rules import Impl, MaskMod, Prepared, Problem, causal_mod, dense_batch_mask, dense_mask, everything, padded, shifted

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


def _timed(fn: Callable, *args, **kwargs):
    """(result, seconds); NB: waits for queued CUDA work, so a setup time is the work's, not its launch."""
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()
    return out, time.perf_counter() - start


MaskFor = Callable[..., MaskMod]  # (n, causal, params, device=...) -> predicate


def _pattern(mask_for: MaskFor | None, n: int, causal: bool, params: dict, device) -> MaskMod:
    if mask_for is None:
        return causal_mod if causal else everything
    return mask_for(n, causal, params, device=device)


def padding_mask(mask_for: MaskFor | None, q, causal: bool, params: dict, lengths) -> tuple[torch.Tensor, torch.Tensor]:
    """A padded batch's (B, 1, n, n) mask, the pattern and a valid query and key (a padding row reads
    key 0: no empty row), and the (B, 1, n, 1) valid rows, whose complement the caller zeroes."""
    b, n = q.shape[0], q.shape[-2]
    valid = torch.tensor(lengths, device=q.device)
    mod = padded(_pattern(mask_for, n, causal, params, q.device), valid, dummy=True)
    rows = (torch.arange(n, device=q.device) < valid[:, None])[:, None, :, None]
    return dense_batch_mask(mod, b, n, device=q.device), rows


def dense_impl(mask_for: MaskFor | None) -> Impl:
    """The masked reference; `mask_for=None` means full attention (causal via tril)."""

    def prepare(q, k, v, *, causal, params, lengths=None):
        if lengths is not None:  # a padded batch: every B·n² score, padding masked out
            (mask, rows), mask_s = _timed(padding_mask, mask_for, q, causal, params, lengths)
            return Prepared(lambda: dense_attention(q, k, v, mask=mask).masked_fill(~rows, 0.0), {"mask_s": mask_s})
        if mask_for is None:
            return Prepared(lambda: dense_attention(q, k, v, causal=causal))
        mod = mask_for(k.shape[-2], causal, params, device=q.device)  # queries are the last rows (decode)
        mask, mask_s = _timed(dense_mask, mod, k.shape[-2], device=q.device, rows=q.shape[-2])
        return Prepared(lambda: dense_attention(q, k, v, mask=mask), {"mask_s": mask_s})

    return Impl("dense", prepare, cost="O(n²) time and memory: materializes the n×n scores",
                work="algorithm" if mask_for is None else "all_pairs", padding="mask")


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
            (mask, rows), mask_s = _timed(padding_mask, mask_for, q, causal, params, lengths)
            return Prepared(
                lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa).masked_fill(~rows, 0.0),
                {"mask_s": mask_s}, {"kernel": sdpa_kernel_chosen(q, k, v, mask=mask, gqa=gqa)},
            )
        if mask_for is None:
            return Prepared(
                lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=gqa),
                notes={"kernel": sdpa_kernel_chosen(q, k, v, causal=causal, gqa=gqa)},
            )
        mod = mask_for(k.shape[-2], causal, params, device=q.device)
        mask, mask_s = _timed(dense_mask, mod, k.shape[-2], device=q.device, rows=q.shape[-2])
        return Prepared(
            lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=gqa),
            {"mask_s": mask_s}, {"kernel": sdpa_kernel_chosen(q, k, v, mask=mask, gqa=gqa)},
        )

    cost = "O(n²) time; full: fused kernel, no n×n scores" if mask_for is None else (
        "O(n²) time and memory: the pattern is a dense n×n boolean mask"
    )
    return Impl("sdpa", prepare, cost=cost, work="algorithm" if mask_for is None else "all_pairs",
                library="torch scaled_dot_product_attention", padding="mask")


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
        (qn, kn, vn), pack_s = _timed(lambda: [jagged(t, lengths or (t.shape[-2],) * b) for t in (q, k, v)])

        def run():
            out = F.scaled_dot_product_attention(qn, kn, vn)  # (B, H, j, d) nested
            return out.transpose(1, 2).to_padded_tensor(0.0, output_size=(b, n, h, d)).transpose(1, 2)

        return Prepared(run, {"pack_s": pack_s})

    return Impl("sdpa-nested", prepare, cost="O(Σ lᵢ²·d): one call over the valid tokens, no padding computed",
                supports_causal=False,  # NB: torch's nested SDPA refuses is_causal (torch 2.13)
                library="torch scaled_dot_product_attention (nested jagged tensors)", padding="mask",
                countable=False)


# ---------------------------------------------------------------------------- FlexAttention
@functools.cache
def _compiled_flex(dynamic: bool = True):
    from torch.nn.attention.flex_attention import flex_attention

    from variants.impls.compiled import sweep_dynamo

    # NB: past dynamo's recompile limit (8) flex_attention silently falls back to an unfused eager
    # path that materializes n×n scores, which a benchmark would then time as "flex" (sweep_dynamo).
    sweep_dynamo()
    # Dynamic shapes: one kernel serves many n (measured here: as fast as static kernels, 0.4–1 s
    # per later shape instead of ~4 s). NB: changing torch's thread count between compile and
    # call is a guard failure and recompiles; the suite keeps one thread count per process.
    return torch.compile(flex_attention, dynamic=dynamic)


_BLOCK_MASKS: dict = {}
_STATIC_ONLY: set[str] = set()  # variants whose mask failed to compile with dynamic shapes


def _block_mask(key, mask_mod, n_q: int, n_k: int, device, batch: int | None = None):
    """Block masks are cached by pattern: the same mask_mod object also keeps compiles cached. A
    padded batch's mask depends on the batch index (`batch` given)."""
    from torch.nn.attention.flex_attention import create_block_mask

    if key not in _BLOCK_MASKS:
        _BLOCK_MASKS[key] = create_block_mask(mask_mod, batch, None, n_q, n_k, device=device)
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
            mod = padded(_pattern(mask_for, n_k, causal, params, q.device), torch.tensor(lengths, device=q.device))
            block_mask, mask_s = _timed(_block_mask, key, mod, n_q, n_k, q.device, len(lengths))
        elif mask_for is None and not causal:
            block_mask, mask_s = None, 0.0
        else:
            key = (name, n_q, n_k, causal, tuple(sorted(params.items())), str(q.device))
            mod = _pattern(mask_for, n_k, causal, params, q.device)
            mod = mod if n_q == n_k or mask_for is None else shifted(mod, n_k - n_q)  # queries: the last rows
            block_mask, mask_s = _timed(_block_mask, key, mod, n_q, n_k, q.device)
        gqa = k.shape[1] != q.shape[1]
        notes = {"compile": "dynamic shapes"}
        flex = _compiled_flex(dynamic=name not in _STATIC_ONLY)

        def run():
            return flex(q, k, v, block_mask=block_mask, enable_gqa=gqa)

        setup = {"block_mask_s": mask_s}
        if warmup:  # compile here, outside the call that is timed
            try:
                _, setup["first_call_s"] = _timed(run)
            except Exception as err:  # NB: inductor fails on some masks with dynamic shapes
                if name in _STATIC_ONLY or "Inductor" not in type(err).__name__ + str(type(err).__mro__):
                    raise
                _STATIC_ONLY.add(name)
                flex = _compiled_flex(dynamic=False)
                _, setup["first_call_s"] = _timed(run)
        if name in _STATIC_ONLY:
            notes["compile"] = "static shapes (the dynamic-shape compile failed for this mask)"
        return Prepared(run, setup, notes)

    return Impl(
        "flex", prepare,
        cost="block-sparse: O(n²) for full, O(visited blocks · 128² · d) for a pattern",
        dtypes=REDUCED,  # NB: FlexAttention on CPU rejects float64 when it compiles
        extra_reasons=_flex_reasons,
        work="algorithm" if mask_for is None else "blocks", countable=False,  # NB: the counter raises under flex
        library="torch FlexAttention", padding="mask",
    )


# ---------------------------------------------------------------------------- xformers
@functools.cache
def _xformers():
    """Import xformers quietly (it warns at import when its C++/CUDA extensions do not load)."""
    logger = logging.getLogger("xformers")
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        import xformers.ops.fmha as fmha
    finally:
        logger.setLevel(level)
    return fmha


@functools.cache
def _xformers_load_error() -> str:
    """Why xformers' compiled library did not load ('' when it did). NB: xformers then says only
    "wasn't build with CUDA support" for every op, which hides the cause (seen with xformers 0.0.35,
    built for CUDA 12.8, beside torch 2.11+cu130)."""
    import xformers._cpp_lib as lib

    err = getattr(lib, "_cpp_library_load_exception", None)
    if err is None:
        return ""
    text = " ".join(str(err).split("Please reinstall")[0].split())
    cause = f" ({type(err.__cause__).__name__}: {str(err.__cause__)[:200]})" if err.__cause__ else ""
    return f"xformers' compiled library did not load: {text}{cause}"


def _xformers_reasons(problem: Problem, bias_for=None) -> list[str]:
    """xformers' own reasons, from every forward op's `not_supported_reasons`, asked with the case's
    real shapes and its real attn_bias (a window bias rules out ops a bias-free input would pass)."""
    try:
        fmha = _xformers()
    except Exception as err:  # ImportError, or an extension that fails on import
        return [f"xformers not importable: {type(err).__name__}: {err}"]
    h, h_kv, n = problem.num_heads, problem.kv_heads, problem.seq_len
    shape = (problem.batch, n, h_kv, h // h_kv, problem.head_dim)  # (B, n, G, H/G, d), as prepare passes it
    if problem.device == "cuda" and not torch.cuda.is_available():
        return ["device=cuda: torch.cuda.is_available() is False on this machine"]
    if problem.device == "cuda" and _xformers_load_error():
        return [_xformers_load_error()]
    q = torch.empty(shape, device=problem.device, dtype=problem.dtype)
    bias = bias_for(n, problem.causal, dict(problem.params)) if bias_for is not None else None
    inp = fmha.Inputs(query=q, key=q, value=q, attn_bias=bias)
    per_op = {op.NAME: op.not_supported_reasons(inp) for op in fmha.ALL_FW_OPS}
    if any(not r for r in per_op.values()):
        return []
    common = set.intersection(*(set(r) for r in per_op.values()))
    out = [f"xformers, all {len(per_op)} forward ops: {r}" for r in sorted(common)]
    for op, reasons in per_op.items():
        rest = [r for r in reasons if r not in common]
        if rest:
            out.append(f"xformers {op}: {'; '.join(rest)}")
    return out


def _xformers_op(fmha, q, k, v, bias) -> str:
    """The forward op xformers' dispatcher picks for these inputs (its NAME). NB: private API."""
    try:
        return fmha.dispatch._dispatch_fw(fmha.Inputs(query=q, key=k, value=v, attn_bias=bias), False).NAME
    except Exception as err:  # noqa: BLE001 - a note, never a failure
        return f"unknown ({type(err).__name__})"


def xformers_impl(bias_for: Callable[[int, bool, dict], object | None], work: str = "blocks") -> Impl:
    """memory_efficient_attention with an attn_bias class (never a dense bias tensor).

    `bias_for(n, causal, params)` returns the attn_bias object (or None for no bias).
    GQA/MQA go in as 5-D (B, n, G, H/G, d) inputs with K/V expanded (a view, no copy).
    """

    def prepare(q, k, v, *, causal, params):
        fmha = _xformers()
        b, h, n_q, d = q.shape
        h_kv, n_k = k.shape[1], k.shape[2]
        bias = bias_for(n_k, causal, params)
        # (B, H, n, d) -> (B, n, G, H/G, d), K/V broadcast over the H/G query heads of a group
        q5 = q.transpose(1, 2).reshape(b, n_q, h_kv, h // h_kv, d)
        k5 = k.transpose(1, 2)[:, :, :, None, :].expand(b, n_k, h_kv, h // h_kv, d)
        v5 = v.transpose(1, 2)[:, :, :, None, :].expand(b, n_k, h_kv, h // h_kv, d)

        def run():
            out = fmha.memory_efficient_attention(q5, k5, v5, attn_bias=bias)
            return out.reshape(b, n_q, h, d).transpose(1, 2)

        return Prepared(run, notes={"kernel": _xformers_op(fmha, q5, k5, v5, bias)})

    return Impl(
        "xformers", prepare, cost="fused kernel; local windows skip masked blocks",
        # NB: devices and dtypes are left to xformers' own op table, so its reasons reach the user.
        extra_reasons=functools.partial(_xformers_reasons, bias_for=bias_for),
        work=work, countable=False, library="xformers memory_efficient_attention",
    )


def xformers_bias(kind: str) -> Callable[[int, bool, dict], object | None]:
    """The attn_bias for `full` ('full') or `sliding_window` ('window')."""

    def bias_for(n, causal, params):
        ab = _xformers().attn_bias
        if kind == "window":
            w = params["window"]
            if causal:
                return ab.LowerTriangularFromBottomRightLocalAttentionMask(w + 1)
            return ab.LocalAttentionFromBottomRightMask(window_left=w, window_right=w)
        return ab.LowerTriangularFromBottomRightMask() if causal else None

    return bias_for
