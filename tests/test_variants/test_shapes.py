"""The shapes real models use: cross attention (n_q ≠ n_k); its theory, checks, grid and fits."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import kv_heads_for

import variants
from suite.analyse import exponents as ex
from suite.plan import grid
from suite.plan.case import Case
from suite.run.measurement import check, inputs
from variants.catalog.linear import Elu
from variants.native.linearized import linear_time
from variants.rules import valid_lengths

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
    return [
        (name, impl)
        for impl, i in spec.impls.items()
        if impl not in ("dense", "flex", "xformers")
        and i.differs is None
        and not spec.reasons(impl, seq_len=37, kv_len=53, dtype=torch.float64)
    ]


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
    g = grid.parse(
        {
            "block": [
                {"variant": ["full", "sliding_window"], "impl": ["sdpa"], "seq_len": [64, 128], "kv_len": [32, 256]}
            ]
        },
        "t",
    )
    assert sorted((c.variant, c.seq_len, c.kv_len) for c in g.cases) == sorted(
        (v, n, k) for v in ("full", "sliding_window") for n in (64, 128) for k in (32, 256)
    )
    assert "n=64 n_k=256" in next(c for c in g.cases if c.kv_len == 256).label()


@pytest.mark.parametrize(
    "value,message",
    [
        ([0], "field 'kv_len' = 0 (allowed: integers from 1 to 2147483647)"),
        ({"min": 64, "max": 1024}, "field 'kv_len' = {'min': 64, 'max': 1024} (allowed: a list of integers"),
    ],
)
def test_a_bad_kv_len_names_the_field(value, message):
    with pytest.raises(grid.ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
        grid.parse({"block": [{"variant": ["full"], "kv_len": value}]}, "t")


def test_kv_len_with_decode_is_refused():
    with pytest.raises(grid.ConfigError, match="field 'mode' = 'decode'"):
        grid.parse({"block": [{"variant": ["full"], "mode": ["decode"], "kv_len": [64]}]}, "t")


def test_the_check_keeps_the_ratio_of_the_lengths():
    """A cross case is checked at n_q ≠ n_k, the longer one at the check's length."""
    case = Case("full", "sdpa", "cpu", "float32", "fwd", 1, 256, 8, 8, 64, False, (), 4096)
    small = inputs.at_length(case, 6)
    q, k, _ = inputs.inputs(small)
    assert (q.shape[-2], k.shape[-2]) == (6, 96)
    err, tol = check.check(case, 96)
    assert err <= tol


def frame(points: dict[tuple[int, int | None], float], impl="sdpa") -> pd.DataFrame:
    """A results table of full attention: (seq_len, kv_len) -> seconds."""
    rows = []
    for (n, kv), t in points.items():
        rows.append(
            {
                "variant": "full",
                "impl": impl,
                "device": "cpu",
                "dtype": "float32",
                "mode": "fwd",
                "batch": 1,
                "seq_len": n,
                "kv_len": kv,
                "num_heads": 8,
                "num_kv_heads": 8,
                "head_dim": 64,
                "causal": False,
                "params": json.dumps({}),
                "status": "ok",
                "time_s": t,
                "time_min_s": t,
                "peak_bytes": np.nan,
                "flops_counted": np.nan,
                "flops": 4 * 8 * n * (kv or n) * 64,
                "claimed_exponent_n": 2.0,
                "claimed_exponent_d": 1.0,
                "claimed_exponent_q": 1.0 if kv else np.nan,
                "claimed_exponent_k": 1.0 if kv else np.nan,
                "impl_work": "algorithm",
                "impl_library": None,
            }
        )
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
    assert row["diagnosis"].startswith(
        "the work (the algorithm's FLOPs; the counter cannot count this path) "
        "grows as n_k^1.00, as claimed, but the rate of work falls as n_k^1.00"
    )


# ----------------------------------------------------------------------------- padding
PADDED = [name for name in variants.names() if variants.get(name).padding]


def test_valid_lengths_are_seeded_bounded_and_scale_with_the_fraction():
    lengths = valid_lengths(8, 1024, 0.5)
    assert lengths == valid_lengths(8, 1024, 0.5) and len(lengths) == 8
    assert sorted(lengths) != list(lengths) or sorted(lengths, reverse=True) != list(lengths)  # a seeded order
    assert abs(sum(lengths) / (8 * 1024) - 0.5) < 0.01 and min(lengths) >= 256 and max(lengths) <= 768
    half = valid_lengths(8, 1024, 0.25)
    assert all(abs(a - 2 * b) <= 1 for a, b in zip(lengths, half))  # proportional below 2/3
    assert valid_lengths(4, 100, 1.0) == (100,) * 4 and min(valid_lengths(4, 100, 0.001)) == 1
    assert max(valid_lengths(16, 1000, 0.9)) <= 1000
    with pytest.raises(ValueError, match="valid_fraction=1.5"):
        valid_lengths(4, 100, 1.5)


def padded_inputs(spec, lengths, n, *, head_dim=8, dtype=torch.float64):
    gen = torch.Generator().manual_seed(1)
    kv = kv_heads_for(spec, 4)
    shape = (len(lengths), 4, n, head_dim)
    return (
        torch.randn(shape, generator=gen, dtype=dtype),
        *(torch.randn((len(lengths), kv, n, head_dim), generator=gen, dtype=dtype) for _ in range(2)),
    )


def alone(spec, q, k, v, lengths, causal, params):
    """The definition, written out: each sequence's valid prefix attended alone, padding rows zero."""
    out = torch.zeros_like(q)
    for b, n in enumerate(lengths):
        out[b : b + 1, :, :n] = spec.attention(
            q[b : b + 1, :, :n], k[b : b + 1, :, :n], v[b : b + 1, :, :n], impl="dense", causal=causal, **params
        )
    return out


def padded_runnable():
    out = []
    for name in PADDED:
        spec = variants.get(name)
        for impl in spec.impls:
            if (
                impl not in ("flex", "xformers")
                and spec.impls[impl].differs is None
                and not spec.reasons(impl, padded=True, dtype=torch.float64)
            ):
                out.append((name, impl))
    return out


@pytest.mark.parametrize("name,impl", padded_runnable())
@pytest.mark.parametrize("causal", [False, True], ids=["bidirectional", "causal"])
def test_every_padded_implementation_equals_each_sequence_alone(name, impl, causal):
    """Lengths 37 (no padding), 1 (one query, its keys otherwise all padding) and 20; padding rows zero."""
    spec = variants.get(name)
    if spec.reasons(impl, padded=True, causal=causal, dtype=torch.float64):
        pytest.skip(f"{name}/{impl} causal={causal}: refused by capability")
    lengths = (37, 1, 20)
    params = {"window": 4} if name == "sliding_window" else {}
    q, k, v = padded_inputs(spec, lengths, 37)
    out = spec.attention(q, k, v, impl=impl, causal=causal, lengths=lengths, **params)
    assert not out.isnan().any()
    assert (out - alone(spec, q, k, v, lengths, causal, params)).abs().max().item() <= 1e-9
    assert out[1, :, 1:].abs().max().item() == 0.0 and out[2, :, 20:].abs().max().item() == 0.0


@pytest.mark.slow
@pytest.mark.parametrize("name", ["full", "sliding_window", "mqa"])
def test_flex_skips_the_padding_and_equals_each_sequence_alone(name):
    spec = variants.get(name)
    lengths = (201, 40, 1, 130)
    q, k, v = padded_inputs(spec, lengths, 201, head_dim=16)
    out = (
        spec.attention(q.float(), k.float(), v.float(), impl="flex", lengths=lengths, window=16)
        if name == "sliding_window"
        else spec.attention(q.float(), k.float(), v.float(), impl="flex", lengths=lengths)
    )
    params = {"window": 16} if name == "sliding_window" else {}
    assert (out.double() - alone(spec, q, k, v, lengths, False, params)).abs().max().item() <= 1e-5


@pytest.mark.parametrize("impl", ["dense", "sdpa"])
def test_a_padded_mask_gives_finite_gradients_equal_to_each_sequence_alone(impl):
    """Padding rows read a dummy key so no softmax row is empty: no NaN reaches the gradients."""
    spec = variants.get("full")
    lengths = (12, 3)
    q, k, v = (t.requires_grad_() for t in padded_inputs(spec, lengths, 12))
    out = spec.attention(q, k, v, impl=impl, causal=True, lengths=lengths)
    grads = torch.autograd.grad(out.sum(), (q, k, v))
    q2, k2, v2 = (t.detach().clone().requires_grad_() for t in (q, k, v))
    expected = torch.autograd.grad(alone(spec, q2, k2, v2, lengths, True, {}).sum(), (q2, k2, v2))
    for got, want in zip(grads, expected):
        assert torch.isfinite(got).all() and (got - want).abs().max().item() <= 1e-9


def test_a_variant_that_is_not_its_own_pattern_on_a_prefix_refuses_padding():
    spec = variants.get("strided")
    assert spec.reasons("native", padded=True)[0].startswith("valid_fraction: strided is not its own pattern")
    q, k, v = padded_inputs(spec, (10, 5), 10)
    with pytest.raises(RuntimeError, match="cannot run here: valid_fraction"):
        spec.attention(q, k, v, impl="native", lengths=(10, 5))
    with pytest.raises(ValueError, match="lengths=\\[10, 11\\]"):
        variants.get("full").attention(q, k, v, impl="sdpa", lengths=(10, 11))


def test_padded_theory_is_the_sum_over_the_valid_lengths():
    full = variants.get("full").theory(seq_len=64, batch=3, num_heads=4, head_dim=8, lengths=(64, 10, 1))
    assert full.pairs == 64 * 64 + 10 * 10 + 1 and full.flops == 4 * 4 * full.pairs * 8
    assert full.kv_bytes == 2 * 3 * 4 * 64 * 8 * 4  # the padded K and V are what memory holds
    window = variants.get("sliding_window").theory(seq_len=64, batch=2, lengths=(64, 10), window=2)
    alone_pairs = sum(int(variants.get("sliding_window").row_counts(n, window=2).sum()) for n in (64, 10))
    assert window.pairs == alone_pairs


def test_the_grid_crosses_valid_fraction_and_refuses_it_with_kv_len_or_decode():
    g = grid.parse(
        {
            "block": [
                {"variant": ["full"], "impl": ["sdpa"], "batch": [4], "seq_len": [64], "valid_fraction": [0.25, 0.5]}
            ]
        },
        "t",
    )
    assert [c.valid_fraction for c in g.cases] == [0.25, 0.5]
    assert g.cases[0].lengths == valid_lengths(4, 64, 0.25) and "valid=0.25" in g.cases[0].label()
    for block, field in [
        ({"valid_fraction": [0]}, "valid_fraction"),
        ({"valid_fraction": [1.5]}, "valid_fraction"),
        ({"valid_fraction": [0.5], "kv_len": [32]}, "valid_fraction"),
        ({"valid_fraction": [0.5], "mode": ["decode"]}, "valid_fraction"),
    ]:
        with pytest.raises(grid.ConfigError, match=f"field '{field}'"):
            grid.parse({"block": [{"variant": ["full"], **block}]}, "t")


def padded_frame(times: dict[str, list[float]], counted: dict[str, list[float]]) -> pd.DataFrame:
    fractions = [0.02, 0.04, 0.08, 0.16, 0.33, 0.66]
    rows = []
    for impl, ts in times.items():
        for f, t, c in zip(fractions, ts, counted[impl]):
            tokens = sum(valid_lengths(4, 4096, f))
            rows.append(
                {
                    "variant": "full",
                    "impl": impl,
                    "device": "cpu",
                    "dtype": "float32",
                    "mode": "fwd",
                    "batch": 4,
                    "seq_len": 4096,
                    "valid_fraction": f,
                    "valid_tokens": tokens,
                    "num_heads": 8,
                    "num_kv_heads": 8,
                    "head_dim": 64,
                    "causal": False,
                    "params": "{}",
                    "status": "ok",
                    "time_s": t,
                    "time_min_s": t,
                    "peak_bytes": np.nan,
                    "flops_counted": c,
                    "flops": 1e3 * tokens**2,
                    "claimed_exponent_n": 2.0,
                    "claimed_exponent_d": 1.0,
                    "impl_work": "algorithm",
                    "impl_library": None,
                }
            )
    return pd.DataFrame(rows)


def test_an_implementation_that_computes_the_padding_is_refuted_and_said_to_pay():
    tokens = np.array([sum(valid_lengths(4, 4096, f)) for f in [0.02, 0.04, 0.08, 0.16, 0.33, 0.66]], float)
    flat = [0.5 * (1 + 0.01 * math.sin(i)) for i in range(6)]  # the padded batch's cost, timing noise on it
    frame = padded_frame(
        {"sdpa": flat, "native": list(1e-11 * tokens**2)}, {"sdpa": [1e12] * 6, "native": list(1e3 * tokens**2)}
    )
    table = ex.padding(ex.all_exponents(frame)).set_index("impl")
    assert table.loc["sdpa", "verdict"] == "refuted" and table.loc["sdpa", "pays"].startswith("yes")
    assert table.loc["native", "verdict"] == "confirmed" and table.loc["native", "pays"].startswith("no")
    assert table.loc["sdpa", "series"] == "sdpa [B=4, n=4096]"
    assert ex.claims(ex.all_exponents(frame)).empty  # padded fits stay out of the self-attention table


def test_the_claim_in_valid_tokens_is_the_formulas_own_exponent_at_the_measured_lengths():
    """A window's pairs go from l² to l·(2w+1) as the sequences pass w: the claim is the formula's slope
    over these points, not 1; a path whose time follows the formula is confirmed, a flat one refuted."""
    tokens = np.array([sum(valid_lengths(4, 4096, f)) for f in [0.02, 0.04, 0.08, 0.16, 0.33, 0.66]], float)
    work = np.array(
        [sum(min(l, 257) * l for l in valid_lengths(4, 4096, f)) for f in [0.02, 0.04, 0.08, 0.16, 0.33, 0.66]], float
    )
    frame = padded_frame(
        {"native": list(1e-10 * work), "flex": [0.2] * 6}, {"native": list(4e3 * work), "flex": [np.nan] * 6}
    )
    frame["flops"] = np.tile(4e3 * work, 2)
    table = ex.padding(ex.all_exponents(frame)).set_index("impl")
    slope = np.polyfit(np.log(tokens), np.log(work), 1)[0]
    assert 1.2 < slope < 1.8 and table.loc["native", "claimed"] == pytest.approx(slope, abs=0.006)
    assert table.loc["native", "verdict"] == "confirmed" and table.loc["native", "pays"].startswith("no")
    assert table.loc["flex", "verdict"] == "refuted" and table.loc["flex", "pays"].startswith("yes, by its time")


# ----------------------------------------------------------------------------- decode
DECODING = [name for name in variants.names() if variants.get(name).decode]


def test_every_pattern_and_the_linear_forms_have_a_decode_step():
    assert {
        "full",
        "mqa",
        "gqa",
        "sliding_window",
        "strided",
        "fixed",
        "global",
        "random",
        "bigbird",
        "neighborhood",
        "linear",
        "performer",
    } <= set(DECODING)
    for name in ("reformer", "linformer", "rfa", "rnn"):
        with pytest.raises(ValueError, match=f"mode=decode: {name} has no decode step"):
            variants.get(name).theory(seq_len=256, mode="decode")


@pytest.mark.parametrize(
    "name,pairs,exponent",
    [
        ("full", lambda n: n, 1.0),
        ("sliding_window", lambda n: 129, 0.0),
        ("global", lambda n: 17, 0.0),
        ("strided", lambda n: None, 0.5),
    ],
)
def test_a_decode_step_scores_its_patterns_last_row(name, pairs, exponent):
    spec = variants.get(name)
    for n in (1024, 4096):
        step = spec.theory(seq_len=n, mode="decode", batch=2, num_heads=4, head_dim=16)
        last = int(spec.row_counts(n)[-1])
        assert step.pairs == last and step.flops == 4 * 2 * 4 * last * 16
        assert pairs(n) in (None, last) and step.claimed_exponent_n == exponent


def test_a_linear_decode_step_costs_the_same_whatever_the_cache():
    spec = variants.get("linear")
    steps = [spec.theory(seq_len=n, mode="decode", num_heads=4, head_dim=16) for n in (256, 65536)]
    assert steps[0] == steps[1] and steps[0].flops == 4 * 4 * 16 * 16 and steps[0].claimed_exponent_n == 0.0


@pytest.mark.slow
@pytest.mark.parametrize("name", ["sliding_window", "strided", "random"])
def test_flex_decode_scores_the_last_row_of_its_block_mask(name):
    spec = variants.get(name)
    q, k, v = padded_inputs(spec, (1,), 700, head_dim=16)
    ref = spec.attention(q, k, v, impl="dense")[:, :, -1:]
    out = spec.attention(q[:, :, -1:].float(), k.float(), v.float(), impl="flex")
    assert (out.double() - ref).abs().max().item() <= 1e-5


# ----------------------------------------------------------------------------- end to end
@pytest.mark.slow
def test_a_grid_of_the_three_shapes_runs_and_reports_each(tmp_path):
    """Cross attention, padding and decode through the runner, the table, the terminal and the report."""
    from helpers import suite, write_grid

    body = """
[[block]]
variant = ["full", "sliding_window"]
impl = ["sdpa", "native"]
seq_len = [16, 32, 64]
kv_len = [48]
[[block]]
variant = ["full"]
impl = ["sdpa"]
seq_len = [16]
kv_len = [16, 32, 64, 128]
[[block]]
variant = ["full", "strided"]
impl = ["sdpa"]
batch = [3]
seq_len = [64]
valid_fraction = [0.1, 0.2, 0.4]
[[block]]
variant = ["sliding_window", "linear"]
impl = ["native"]
mode = ["decode"]
seq_len = [32, 64, 128]
"""
    grid = write_grid(tmp_path, body, name="shapes")
    res = suite(
        "run",
        "--grid",
        str(grid),
        "--run-id",
        "s",
        "--results-dir",
        str(tmp_path / "results"),
        "--reports-dir",
        str(tmp_path / "reports"),
        cwd=tmp_path,
        report=True,
    )
    assert res.returncode == 0, res.stderr
    table = pd.read_parquet(tmp_path / "results" / "s" / "results.parquet")
    cross = table[table["kv_len"].notna()]
    assert set(cross.loc[cross["variant"] == "full", "status"]) == {"ok"}
    assert cross.loc[cross["variant"] == "sliding_window", "reason"].str.contains("kv_len=48 ≠ seq_len=").all()
    padded = table[table["valid_fraction"].notna()]
    assert list(padded.loc[padded["variant"] == "full", "valid_tokens"]) == [
        sum(valid_lengths(3, 64, f)) for f in (0.1, 0.2, 0.4)
    ]
    assert padded.loc[padded["variant"] == "strided", "status"].eq("skipped").all()
    assert table.loc[table["mode"] == "decode", "status"].eq("ok").all()
    assert table.loc[table["status"] == "ok", "check_error"].notna().all()  # every timed path was checked
    for line in ("cross attention, each series", "padded batches, in valid tokens", "decode, one query"):
        assert line in res.stdout, res.stdout
    html = (tmp_path / "reports" / "s" / "index.html").read_text()
    for section in ('id="cross"', 'id="padding"', 'id="decode"'):
        assert section in html
    assert "sdpa [n_q=16]" in html and "sdpa [B=3, n=64]" in html


def test_a_padded_case_is_checked_on_its_own_padding_path(monkeypatch):
    """The check's cache must not answer a padded case with its unpadded twin's result."""
    seen = []
    real = check.against_reference

    def spy(spec, impl, make_inputs, n, params, causal, lengths_for=lambda n: None, grads=False):
        seen.append(lengths_for(n))
        return real(spec, impl, make_inputs, n, params, causal, lengths_for, grads)

    monkeypatch.setattr(check, "against_reference", spy)
    plain = Case("full", "sdpa", "cpu", "float32", "fwd", 3, 256, 4, 4, 16, False)
    check.check(plain, 96)
    check.check(dataclasses.replace(plain, valid_fraction=0.25), 96)
    assert seen == [None, valid_lengths(3, 96, 0.25)]


def test_a_cross_series_ladder_settles_on_its_claim_in_n_q():
    """The ladder judges a cross series by its claim in n_q (1), not by the self-attention claim (2)."""
    from suite.plan.ladder import Ladder
    from suite.run.settle import advance

    template = Case("full", "sdpa", "cpu", "float32", "fwd", 1, 256, 8, 8, 64, False, (), 1024)
    n = np.array([256, 512, 1024, 2048, 4096, 8192])
    rows = pd.DataFrame(
        {
            "seq_len": n,
            "time_s": 1e-6 * n,
            "time_min_s": 1e-6 * n,
            "claimed_exponent_n": 2.0,
            "claimed_exponent_q": 1.0,
            "kv_len": 1024,
            "reason": "",
            "peak_bytes": 1e3 * n,
            "status": "ok",
        }
    )
    step = advance(Ladder(template, 256, 65536), rows, width=0.2, max_call_s=10.0, memory_gib=16.0)
    assert step.stop == "settled" and step.why.startswith("confirmed"), step
