"""Input checks shared by every variant: each error names the argument, its value and what is allowed."""

from __future__ import annotations

import torch


def check_inputs(spec, q, k, v, causal: bool) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise ValueError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
        if t.dim() != 4:
            raise ValueError(f"{name}.shape={tuple(t.shape)} (allowed: 4-D (batch, heads, seq_len, head_dim))")
        if not t.is_floating_point():
            raise ValueError(f"{name}.dtype={t.dtype} (allowed: a floating dtype)")
    if not isinstance(causal, bool):
        raise ValueError(f"causal={causal!r} (allowed: True or False)")
    if k.shape != v.shape:
        raise ValueError(f"v.shape={tuple(v.shape)} (allowed: equal to k.shape={tuple(k.shape)})")
    if q.dtype != k.dtype or q.dtype != v.dtype:
        raise ValueError(f"dtypes q={q.dtype}, k={k.dtype}, v={v.dtype} (allowed: all equal)")
    if q.device != k.device or q.device != v.device:
        raise ValueError(f"devices q={q.device}, k={k.device}, v={v.device} (allowed: all equal)")
    b, h, n_q, d = q.shape
    if k.shape[0] != b:
        raise ValueError(f"k.shape[0]={k.shape[0]} (allowed: the batch of q, {b})")
    if k.shape[3] != d:
        raise ValueError(f"k.shape[3]={k.shape[3]} (allowed: the head_dim of q, {d})")
    if min(q.shape) == 0 or min(k.shape) == 0:
        raise ValueError(f"q.shape={tuple(q.shape)}, k.shape={tuple(k.shape)} (allowed: no empty dimension)")
    n_k = k.shape[2]
    if n_q != n_k:
        if not (spec.cross or (spec.decode and n_q == 1)):
            step = "; or one query, a decode step" if spec.decode else ""
            raise ValueError(f"q seq_len={n_q}, k seq_len={n_k} (allowed: equal{step}; {spec.name} {spec.cross_note})")
        if causal:
            raise ValueError(
                f"q seq_len={n_q}, k seq_len={n_k} with causal=True (allowed: equal lengths, or "
                "causal=False: queries and keys of two sequences share no positions)"
            )
    h_kv = k.shape[1]
    if spec.kv_heads == "equal" and h_kv != h:
        raise ValueError(f"k.shape[1]={h_kv} (allowed: num_heads of q, {h}; use mqa or gqa for fewer)")
    if spec.kv_heads == "one" and h_kv != 1:
        raise ValueError(f"k.shape[1]={h_kv} (allowed: 1, multi-query attention shares one K/V head)")
    if spec.kv_heads == "divides" and h % h_kv:
        raise ValueError(f"k.shape[1]={h_kv} (allowed: a divisor of num_heads={h})")


def against_reference(
    spec,
    impl: str,
    make_inputs,
    seq_len: int,
    params: dict,
    causal: bool,
    lengths_for=lambda n: None,
    grads: bool = False,
) -> tuple[float, float]:
    """max |impl − dense in float64| / max(1, max |dense|), and the least tolerance the impl asks for.

    `make_inputs(n)` gives q, k, v at length n; `lengths_for(n)` a padded batch's valid lengths there. A library whose definition differs (`Impl.differs`)
    is checked where the two coincide: its length, parameters and inputs. With `grads` (a fwd_bwd
    case) the gradients of q, k and v under a seeded random upstream gradient are checked as well:
    the backward is a path of its own (a native path's autograd form, or its own backward).
    """
    differs = spec.impls[impl].differs
    if differs is not None:
        seq_len, params = differs.check_shape(seq_len, spec.resolve(seq_len, params))
    q, k, v = make_inputs(seq_len)
    if differs is not None:
        q, k, v = differs.check_inputs(q, k, v)
    lengths = lengths_for(seq_len)
    run = lambda *qkv, impl: spec.attention(*qkv, impl=impl, causal=causal, lengths=lengths, **params)
    pairs = _with_grads(run, impl, q, k, v) if grads else _outputs(run, impl, q, k, v)
    err = max((got.double() - ref).abs().max().item() / max(1.0, ref.abs().max().item()) for got, ref in pairs)
    return (err if err == err else float("inf")), (differs.tol or 0.0) if differs is not None else 0.0


def _outputs(run, impl, q, k, v):
    """[(impl's output, dense float64's)]."""
    with torch.no_grad():
        return [(run(q, k, v, impl=impl), run(*(t.double() for t in (q, k, v)), impl="dense"))]


def _with_grads(run, impl, q, k, v):
    """[(impl's, dense float64's)] for the output and the gradients of q, k and v."""
    upstream = None
    pairs = []
    for name, dtype in ((impl, q.dtype), ("dense", torch.float64)):
        qkv = [t.detach().to(dtype).requires_grad_(True) for t in (q, k, v)]
        out = run(*qkv, impl=name)
        if upstream is None:
            upstream = torch.randn(out.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
        got = torch.autograd.grad(out, qkv, upstream.to(out.device, out.dtype), allow_unused=True)
        pairs.append([out.detach()] + [torch.zeros_like(t) if g is None else g for t, g in zip(qkv, got)])
    return list(zip(*pairs))
