"""MQA's and GQA's native path per KV group through oneDNN (variants.native.grouped.heads): the float32 path the
CPU sweep times, in several chunks a group, against the float64 dense reference."""

from __future__ import annotations

import pytest
import torch
from helpers import inputs

import variants
from variants.native.grouped.heads import MIN_ROWS, GroupedKeys


@pytest.mark.slow  # a numerical check at the sweep's sizes: the full suite runs it, the fast lane not
@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
@pytest.mark.parametrize("name, batch, kv_heads, n", [("gqa", 1, 4, 2048), ("gqa", 2, 2, 1024), ("mqa", 1, 1, 2048)])
def test_each_groups_chunks_through_onednn_equal_the_reference(name, batch, kv_heads, n, causal):
    """H = 8, d = 64. NB: with every group's copy of V held beside a step, H/G = 2 at n = 4096 went one
    query position a chunk (12-75x SDPA's time); a group's chunk here is tens of positions, several a group."""
    spec = variants.get(name)
    q, k, v = inputs(spec, batch=batch, heads=8, head_dim=64, seq_len=n, kv_heads=kv_heads)
    keys = GroupedKeys(causal)
    small = (q.float(), k.float(), v.float())
    assert keys._by_groups(*small[:2]), "the per-group oneDNN path is the one tested"
    rows = keys._group_rows(*small[:2])
    assert MIN_ROWS <= 8 // kv_heads * rows and rows < n // 2, rows
    ref = spec.attention(q, k, v, impl="dense", causal=causal)
    got = spec.attention(*small, impl="native", causal=causal)
    assert (got.double() - ref).abs().max().item() <= 1e-4


def test_a_decode_step_keeps_the_batched_product():
    """A group's 1-8 query rows against the whole cache do not pay for V's copy: the batched path."""
    spec = variants.get("gqa")
    q, k, v = inputs(spec, batch=1, heads=16, head_dim=64, seq_len=4096, kv_heads=4, dtype=torch.float32)
    assert not GroupedKeys(False)._by_groups(q[:, :, -1:], k)
    assert GroupedKeys(False)._by_groups(q, k)
