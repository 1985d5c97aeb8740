"""Correctness and approximation: an implementation against the dense float64 reference at a small shape,
and an approximating variant's error against the variant it approximates. Cached per configuration."""

from __future__ import annotations

import torch

import variants
from suite.plan.case import Case
from suite.run.measurement.inputs import at_length, inputs
from variants.rules import against_reference

# Tolerances of the correctness check, relative to the reference output's largest magnitude.
CHECK_TOL = {"float64": 1e-8, "float32": 1e-4, "bfloat16": 4e-2, "float16": 1e-2}


_CHECKED: dict[tuple, tuple[float, float]] = {}


def check(case: Case, check_seq_len: int) -> tuple[float, float]:
    """Max |impl − dense float64| at a small shape (and of the gradients, in fwd_bwd mode), and the
    tolerance; cached per configuration (a cross case's per ratio n_q : n_k, both scaled so the
    longer is at most check_seq_len; a padded case's per valid fraction, so its padding path is
    checked, not the unpadded one in its place)."""
    spec = variants.get(case.variant)
    n = max(1, min(case.seq_len, check_seq_len * case.seq_len // max(case.seq_len, case.key_len)))
    try:
        spec.resolve(n, dict(case.params))
    except ValueError:  # an explicit parameter needs a longer sequence: check at the case's n
        n = case.seq_len
    shape = None if case.kv_len is None else (n, at_length(case, n).kv_len)
    key = (
        case.variant,
        case.impl,
        case.device,
        case.dtype,
        case.mode,
        case.causal,
        case.params,
        case.num_heads,
        case.num_kv_heads,
        case.head_dim,
        shape,
        case.valid_fraction,
    )
    if key not in _CHECKED:
        err, floor = against_reference(
            spec,
            case.impl,
            lambda m: inputs(at_length(case, m)),
            n,
            dict(case.params),
            case.causal,
            lambda m: at_length(case, m).lengths,
            grads=case.mode == "fwd_bwd",
        )
        _CHECKED[key] = (err, max(CHECK_TOL[case.dtype], floor))
    return _CHECKED[key]


APPROX_SEQ_LEN = 1024  # where an approximating variant's error against its target is measured


_APPROX: dict[tuple, float] = {}


def approximation_error(case: Case) -> tuple[float, int] | None:
    """‖out − target‖ / ‖target‖ against the variant the case approximates, both dense in float64.

    The algorithm's error (performer against softmax attention), not the implementation's: that one
    is `check`'s. Measured at n = min(seq_len, APPROX_SEQ_LEN); None for exact variants.
    """
    spec = variants.get(case.variant)
    if spec.approximates is None:
        return None
    n = min(case.seq_len, APPROX_SEQ_LEN)
    key = (case.variant, case.params, case.num_heads, case.num_kv_heads, case.head_dim, case.causal, case.mode, n)
    if key not in _APPROX:
        q, k, v = inputs(at_length(case, n), dtype=torch.float64, device="cpu")
        with torch.no_grad():
            out = spec.attention(q, k, v, impl="dense", causal=case.causal, **dict(case.params))
            ref = variants.get(spec.approximates).attention(q, k, v, impl="dense", causal=case.causal)
        _APPROX[key] = ((out - ref).norm() / ref.norm()).item()
    return _APPROX[key], n
