"""Per-query key lists by slices of keys (variants.native.keys.csr_slices): `random`'s and bigbird's forward past
a few MiB of K. Each pair lands in exactly one slice, and the sliced forward equals the dense
reference (small n, slices made small) and the one-pass and gathered forms at a length that slices
with the real constants (the sweeps' d = 64, float32)."""

from __future__ import annotations

import importlib
from types import SimpleNamespace
from unittest import mock

import pytest
import torch
from helpers import inputs

import variants
from variants.catalog.random_keys import draw
from variants.native.keys import rows as native

csr_slices = importlib.import_module("variants.native.keys.csr_slices")  # the module: the package exports its function


def _keys(n: int, like: torch.Tensor) -> native.RowKeys:
    """random's keys (itself and 32 drawn) with the slices the rule cuts, whichever `fastest` would keep."""
    idx = torch.cat([torch.arange(n)[:, None], draw(n, 32, 0)], dim=1)
    with mock.patch.object(native, "fastest", lambda slices, *args: slices):
        return native.row_keys(idx, torch.ones(idx.shape, dtype=torch.bool), like)


def test_every_listed_pair_lands_in_one_slice_with_its_key():
    n = 40000  # d = 64, float32: K is 9.8 MiB, so 3 slices of SLICE_BYTES = 4 MiB at most
    rows = _keys(n, torch.empty(1, 1, n, 64))
    assert len(rows.slices) == 3
    at = torch.cat([s.at for s in rows.slices])
    assert torch.equal(at.sort().values, torch.arange(n * 33))
    for s in rows.slices:
        keys = rows.idx.reshape(-1)[s.at]
        assert bool(((keys >= s.k0) & (keys < s.k1)).all())
        assert torch.equal(s.pattern.col_indices() + s.k0, keys)
        assert s.pattern.crow_indices()[-1].item() == s.at.numel()


def test_a_slice_keeps_at_least_min_entries_a_row_and_one_slice_stays_the_pattern():
    assert len(_keys(16384, torch.empty(1, 1, 16384, 64)).slices) == 1  # K of 4 MiB: one pass
    assert _keys(16384, torch.empty(1, 1, 16384, 64)).slices[0].at is None
    assert len(_keys(1 << 17, torch.empty(1, 1, 1 << 17, 64)).slices) == 33 // csr_slices.MIN_ENTRIES


def test_the_sliced_forward_equals_the_one_pass_and_the_gathered_forms_at_the_real_constants():
    n, d = 40000, 64
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, n, d) for _ in range(3))
    rows = _keys(n, q)
    assert len(rows.slices) > 1
    sliced = native.sparse_part(q, k, v, rows=rows, need_lse=True)
    one = native.sparse_part(q, k, v, rows=native.RowKeys(rows.idx, rows.valid, rows.pattern), need_lse=True)
    gathered = native.gather_part(q, k, v, idx=rows.idx, valid=rows.valid, need_lse=True)
    for other in (one, gathered):
        assert (sliced.out - other.out).abs().max().item() <= 2e-6
        assert (sliced.lse - other.lse).abs().max().item() <= 2e-5


@pytest.mark.parametrize("slow", ["slices", "one pass"])
def test_fastest_keeps_the_form_that_took_less_time_and_decides_once_a_shape(slow, monkeypatch):
    """The slower form takes ten times the other on `fastest`'s clock (a clock the test moves, so the machine's
    load cannot turn the choice): `fastest` keeps the other, and its second call at the same shape reuses the
    decision without timing again."""
    n = 40000
    rows = _keys(n, torch.empty(1, 1, n, 64))
    scores, calls, clock = csr_slices.sampled_scores, [], [0.0]

    def paced(slices, *args):
        calls.append(len(slices))
        clock[0] += 10.0 if (len(slices) > 1) == (slow == "slices") else 1.0
        return scores(slices, *args)

    monkeypatch.setattr(csr_slices, "sampled_scores", paced)
    monkeypatch.setattr(csr_slices, "time", SimpleNamespace(perf_counter=lambda: clock[0]))
    monkeypatch.setattr(csr_slices, "_CHOICES", {})
    kept = csr_slices.fastest(rows.slices, rows.pattern, 64)
    assert len(kept) == (1 if slow == "slices" else len(rows.slices)) and sorted(set(calls)) == [1, 3]
    assert len(calls) == 6  # 3 interleaved rounds of both
    assert csr_slices.fastest(rows.slices, rows.pattern, 64) == kept and len(calls) == 6
    if len(kept) == 1:
        assert kept[0].at is None and kept[0].pattern is rows.pattern


@pytest.mark.parametrize("name", ["random", "bigbird"])
def test_small_slices_equal_the_dense_reference(name, monkeypatch):
    """Slices of 5–40 keys at n = 97, with the drawn keys that are not valid (the diagonal; later
    keys when causal) masked, in float64."""
    spec = variants.get(name)
    q, k, v = inputs(spec, batch=2, heads=3, head_dim=16, seq_len=97)
    seen, scores = [], csr_slices.sampled_scores
    monkeypatch.setattr(native, "sampled_scores", lambda slices, *a: (seen.append(len(slices)), scores(slices, *a))[1])
    monkeypatch.setattr(csr_slices, "MIN_ENTRIES", 1)
    monkeypatch.setattr(native, "fastest", lambda slices, *args: slices)  # the slices, whatever was faster
    for size, count in ((40, 3), (5, 20)):
        monkeypatch.setattr(csr_slices, "SLICE_BYTES", size * 16 * 8)
        for causal in (False, True):
            seen.clear()
            ref = spec.attention(q, k, v, impl="dense", causal=causal)
            assert (spec.attention(q, k, v, impl="native", causal=causal) - ref).abs().max().item() <= 1e-9
            assert seen and set(seen) == {count}, seen  # every head went by `count` slices


@pytest.mark.filterwarnings("ignore:Sparse CSR tensor support is in beta")
def test_the_embedding_bag_product_equals_the_csr_product_with_empty_rows():
    """`csr_matmul` on the CPU (embedding bags) against torch's CSR × dense product, which it replaces
    there and which other devices keep: rows of 0 to 5 entries (an empty row is a key no query lists,
    in the backward's transposed pattern), float32 and float64."""
    gen = torch.Generator().manual_seed(0)
    counts = torch.randint(0, 6, (300,), generator=gen)
    counts[::7] = 0
    crow = torch.zeros(301, dtype=torch.long)
    crow[1:] = counts.cumsum(0)
    col = torch.cat([torch.randperm(250, generator=gen)[:c].sort().values for c in counts.tolist()])  # CSR's order
    for dtype in (torch.float32, torch.float64):
        values = torch.randn(col.numel(), generator=gen, dtype=dtype)
        table = torch.randn(250, 24, generator=gen, dtype=dtype)
        expected = torch.sparse_csr_tensor(crow, col, values, (300, 250), check_invariants=True) @ table
        got = csr_slices.csr_matmul(crow, col, values, table)
        assert got.shape == (300, 24) and got.dtype == dtype
        assert (got - expected).abs().max().item() <= (1e-5 if dtype == torch.float32 else 1e-12)
        assert bool((got[counts == 0] == 0).all())
