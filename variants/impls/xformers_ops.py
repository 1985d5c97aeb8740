"""xformers' memory_efficient_attention with an attn_bias class, and xformers' own reasons where it cannot run."""

from __future__ import annotations

import functools
import logging
from typing import Callable

import torch

from variants.rules import Impl, Prepared, Problem


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
        "xformers",
        prepare,
        cost="fused kernel; local windows skip masked blocks",
        # NB: devices and dtypes are left to xformers' own op table, so its reasons reach the user.
        extra_reasons=functools.partial(_xformers_reasons, bias_for=bias_for),
        work=work,
        countable=False,
        library="xformers memory_efficient_attention",
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
