"""The shapes real models use: cross attention (n_q ≠ n_k); its theory, checks, grid and fits."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch

import variants
from conftest import kv_heads_for
from suite.analyse import exponents as ex
from suite.plan import grid
from suite.plan.case import Case
from suite.run import measure
from variants.linearized import linear_time
from variants.linear import Elu

CROSS = [name for name in variants.names() if variants.get(name).cross]
POSITIONAL = [name for name in variants.names() if not variants.get(name).cross]
SHAPES = [(37, 53), (53, 37), (1, 53)]  # n_q < n_k, n_q > n_k, one query


def cross_inputs(spec, n_q: int, n_k: int, *, heads=4, head_dim=8, seed=0):
    gen = torch.Generator().manual_seed(seed)
    kv = kv_heads_for(spec, heads)
    q = torch.randn(2, heads, n_q, head_dim, generator=gen, dtype=torch.float64)
    k = torch.randn(2, kv, n_k, head_dim, generator=gen, dtype=torch.float64)
    v = torch.randn(2, kv, n_k, head_dim, generator=gen, dtype=torch.float64)
    return q, k, v


def runnable(name):
    spec = variants.get(name)
    return [(name, impl) for impl, i in spec.impls.items() if impl not in ("dense", "flex", "xformers")
            and i.differs is None and not spec.reasons(impl, seq_len=37, kv_len=53, dtype=torch.float64)]


def test_the_variants_that_define_cross_attention():
    """Position-free forms take n_q ≠ n_k; a pattern on one sequence's positions does not."""
    assert {"full", "mqa", "gqa", "linear", "performer", "additive", "multiplicative"} <= set(CROSS)
    assert {"sliding_window", "strided", "bigbird", "random", "reformer", "rnn"} <= set(POSITIONAL)


def test_dense_cross_attention_is_softmax_over_the_other_sequence():
    """The reference itself, against the formula written out here."""
    spec = variants.get("full")
    q, k, v = cross_inputs(spec, 5, 11)
    scores = torch.einsum("bhid,bhjd->bhij", q, k) / 8**0.5
    expected = torch.einsum("bhij,bhjd->bhid", scores.softmax(-1), v)
    assert torch.allclose(spec.attention(q, k, v, impl="dense"), expected, atol=1e-12)


@pytest.mark.parametrize("name,impl", [p for name in CROSS for p in runnable(name)])
@pytest.mark.parametrize("n_q,n_k", SHAPES)
def test_every_cross_implementation_equals_the_dense_reference(name, impl, n_q, n_k):
    spec = variants.get(name)
    q, k, v = cross_inputs(spec, n_q, n_k)
    out = spec.attention(q, k, v, impl=impl)
    ref = spec.attention(q, k, v, impl="dense")
    assert out.shape == (2, 4, n_q, 8)
    assert (out - ref).abs().max().item() <= 1e-9


@pytest.mark.slow
@pytest.mark.parametrize("n_q,n_k", [(67, 301), (301, 67)])
def test_flex_cross_attention_equals_the_dense_reference(n_q, n_k):
    spec = variants.get("full")
    q, k, v = cross_inputs(spec, n_q, n_k, head_dim=16)
    out = spec.attention(q.float(), k.float(), v.float(), impl="flex")
    assert (out.double() - spec.attention(q, k, v, impl="dense")).abs().max().item() <= 1e-5


@pytest.mark.parametrize("n_q,n_k", [(37, 301), (301, 37)])
def test_linear_time_streams_the_keys_of_another_length(n_q, n_k):
    """The native path's key loop runs over n_k in chunks (64 rows here), whatever n_q is."""
    q, k, v = cross_inputs(variants.get("linear"), n_q, n_k)
    phi = Elu()
    out = linear_time(phi, q, k, v, False, budget=1)
    ref = variants.get("linear").attention(q, k, v, impl="dense")
    assert (out - ref).abs().max().item() <= 1e-9


@pytest.mark.parametrize("name", POSITIONAL)
def test_a_positional_variant_refuses_cross_attention_by_reason_and_by_error(name):
    spec = variants.get(name)
    impl = next(iter(spec.impls))
    why = spec.reasons(impl, seq_len=64, kv_len=128)
    assert why and why[0].startswith(f"kv_len=128 ≠ seq_len=64: {name} ")
    q, k, v = cross_inputs(spec, 64, 128)
    with pytest.raises(ValueError, match="q seq_len=64, k seq_len=128"):
        spec.attention(q, k, v, impl=impl)
    with pytest.raises(ValueError, match="kv_len=128"):
        spec.theory(seq_len=64, kv_len=128)
    assert spec.reasons(impl, seq_len=64, kv_len=64) == spec.reasons(impl, seq_len=64)  # n_k = n_q: self


def test_causal_cross_attention_is_refused():
    spec = variants.get("full")
    assert "causal=True with kv_len=128" in spec.reasons("sdpa", seq_len=64, kv_len=128, causal=True)[0]
    q, k, v = cross_inputs(spec, 64, 128)
    with pytest.raises(ValueError, match="causal=True"):
        spec.attention(q, k, v, impl="sdpa", causal=True)


def test_cross_theory_counts_each_length():
    full = variants.get("full").theory(seq_len=256, kv_len=1024, batch=2, num_heads=4, head_dim=16)
    assert (full.pairs, full.flops) == (256 * 1024, 4 * 2 * 4 * 256 * 1024 * 16)
    assert (full.exponent_q, full.exponent_k, full.kv_bytes) == (1.0, 1.0, 2 * 2 * 4 * 1024 * 16 * 4)
    linear = variants.get("linear").theory(seq_len=256, kv_len=1024, batch=2, num_heads=4, head_dim=16)
    assert linear.flops == 2 * 2 * 4 * (256 + 1024) * 16 * 16  # K′ᵀV over n_k rows, Q′S over n_q rows
    additive = variants.get("additive").theory(seq_len=256, kv_len=1024)
    assert additive.pairs == 256 * 1024 and additive.exponent_k == 1.0


@pytest.mark.parametrize("name", CROSS)
def test_kv_len_equal_to_seq_len_is_self_attention_theory(name):
    spec = variants.get(name)
    kw = {"num_kv_heads": 2} if spec.kv_heads == "divides" else {}
    assert spec.theory(seq_len=96, kv_len=96, **kw) == spec.theory(seq_len=96, **kw)


def test_a_self_attention_case_keeps_its_id():
    """kv_len joined the case's fields; a case without it hashes as before (runs and baselines match)."""
    case = grid.parse({"block": [{"variant": ["full"], "impl": ["sdpa"], "seq_len": [256]}]}, "t").cases[0]
    assert "kv_len" not in case.key
    assert case.case_id == "f0d7ed3a7529790c"  # the id of this case before kv_len existed
    cross = Case.from_key({**case.key, "kv_len": 1024})
    assert cross.case_id != case.case_id and Case.from_key(cross.key) == cross


def test_the_grid_crosses_kv_len_with_the_other_axes():
    g = grid.parse({"block": [{"variant": ["full", "sliding_window"], "impl": ["sdpa"], "seq_len": [64, 128],
                               "kv_len": [32, 256]}]}, "t")
    assert sorted((c.variant, c.seq_len, c.kv_len) for c in g.cases) == sorted(
        (v, n, k) for v in ("full", "sliding_window") for n in (64, 128) for k in (32, 256))
    assert "n=64 n_k=256" in next(c for c in g.cases if c.kv_len == 256).label()


@pytest.mark.parametrize("value,message", [
    ([0], "field 'kv_len' = 0 (allowed: integers >= 1)"),
    ({"min": 64, "max": 1024}, "field 'kv_len' = {'min': 64, 'max': 1024} (allowed: a list of integers"),
])
def test_a_bad_kv_len_names_the_field(value, message):
    with pytest.raises(grid.ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        grid.parse({"block": [{"variant": ["full"], "kv_len": value}]}, "t")


def test_kv_len_with_decode_is_refused():
    with pytest.raises(grid.ConfigError, match="field 'mode' = 'decode'"):
        grid.parse({"block": [{"variant": ["full"], "mode": ["decode"], "kv_len": [64]}]}, "t")


def test_the_check_keeps_the_ratio_of_the_lengths():
    """A cross case is checked at n_q ≠ n_k, the longer one at the check's length."""
    case = Case("full", "sdpa", "cpu", "float32", "fwd", 1, 256, 8, 8, 64, False, (), 4096)
    small = measure.at_length(case, 6)
    q, k, _ = measure.inputs(small)
    assert (q.shape[-2], k.shape[-2]) == (6, 96)
    err, tol = measure.check(case, 96)
    assert err <= tol


def frame(points: dict[tuple[int, int | None], float], impl="sdpa") -> pd.DataFrame:
    """A results table of full attention: (seq_len, kv_len) -> seconds."""
    rows = []
    for (n, kv), t in points.items():
        rows.append({"variant": "full", "impl": impl, "device": "cpu", "dtype": "float32", "mode": "fwd",
                     "batch": 1, "seq_len": n, "kv_len": kv, "num_heads": 8, "num_kv_heads": 8, "head_dim": 64,
                     "causal": False, "params": json.dumps({}), "status": "ok", "time_s": t, "time_min_s": t,
                     "peak_bytes": np.nan, "flops_counted": np.nan, "flops": 4 * 8 * n * (kv or n) * 64,
                     "claimed_exponent_n": 2.0,
                     "claimed_exponent_d": 1.0, "claimed_exponent_q": 1.0 if kv else np.nan,
                     "claimed_exponent_k": 1.0 if kv else np.nan, "impl_work": "algorithm", "impl_library": None})
    return pd.DataFrame(rows)


def test_cross_series_are_fitted_in_each_length_and_kept_apart_from_self_attention():
    lengths = [2**i for i in range(8, 15)]
    points = {(n, None): 1e-9 * n * n for n in lengths}  # self: n²
    points.update({(n, 1024): 1e-9 * n * 1024 for n in lengths})  # n_q grows, n_k = 1024
    points.update({(256, kv): 1e-9 * 256 * kv for kv in lengths})  # n_k grows, n_q = 256
    fits = ex.all_exponents(frame(points))
    main = ex.claims(fits)
    assert list(main["series"]) == ["sdpa"] and main.iloc[0]["claimed"] == 2.0
    assert main.iloc[0]["verdict"] == "confirmed"
    cross = ex.cross(fits).set_index("length")
    assert cross.loc["n_q", "series"] == "sdpa [n_k=1024]" and cross.loc["n_k", "series"] == "sdpa [n_q=256]"
    for length in ("n_q", "n_k"):
        assert cross.loc[length, "claimed"] == 1.0
        assert cross.loc[length, "verdict"] == "confirmed", cross.loc[length, "why"]


def test_a_cross_series_that_grows_as_the_square_is_refuted_in_that_length():
    lengths = [2**i for i in range(8, 15)]
    fits = ex.all_exponents(frame({(256, kv): 1e-12 * kv * kv for kv in lengths}))
    row = ex.cross(fits).iloc[0]
    assert row["length"] == "n_k" and row["verdict"] == "refuted" and abs(row["slope"] - 2) < 0.01
    assert row["diagnosis"].startswith("the work (the algorithm's FLOPs; the counter cannot count this path) "
                                       "grows as n_k^1.00, as claimed, but the rate of work falls as n_k^1.00")
