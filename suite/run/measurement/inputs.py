"""A case's inputs (seeded q, k, v) and the zero-argument closure that is timed for its mode."""

from __future__ import annotations

from typing import Callable

import torch

import variants
from suite.plan.case import DTYPES, Case


def inputs(case: Case, *, dtype=None, device=None, requires_grad=False, seed=0):
    """q (B, H, n_q, d), k and v (B, H_kv, n_k, d), seeded: n_q = 1 in decode mode, n_k = kv_len
    where the keys are another sequence's."""
    n_q, n = case.query_len, case.key_len
    dtype = dtype or DTYPES[case.dtype]
    device = device or case.device
    gen = torch.Generator(device="cpu").manual_seed(seed)

    def make(heads, rows):
        t = torch.randn(case.batch, heads, rows, case.head_dim, generator=gen, dtype=torch.float32)
        return t.to(device=device, dtype=dtype).requires_grad_(requires_grad)

    return make(case.num_heads, n_q), make(case.num_kv_heads, n), make(case.num_kv_heads, n)


def build(case: Case, q, k, v) -> tuple[Callable[[], object], dict]:
    """The zero-argument closure to time for the case's mode, and its setup costs."""
    spec = variants.get(case.variant)
    prepared = spec.prepare(q, k, v, impl=case.impl, causal=case.causal, lengths=case.lengths, **dict(case.params))
    if case.mode != "fwd_bwd":
        return prepared, prepared.setup_s
    grad = torch.ones_like(prepared())

    def forward_backward():
        out = prepared()
        return torch.autograd.grad(out, (q, k, v), grad, allow_unused=True)  # layers read q only

    return forward_backward, prepared.setup_s


def at_length(case: Case, n: int) -> Case:
    """The case at batch 1 and length n: where checks against a dense reference are affordable. A
    cross case's keys are scaled alike, so the check keeps n_q ≠ n_k and which one is longer; a padded
    batch keeps its batch (each sequence its own valid length)."""
    kv_len = None if case.kv_len is None else max(1, round(case.kv_len * n / case.seq_len))
    batch = 1 if case.valid_fraction is None else case.batch
    return Case(**{**case.key, "batch": batch, "seq_len": n, "params": case.params, "kv_len": kv_len})
