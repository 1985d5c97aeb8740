"""Fits, verdicts, crossovers and efficiency on synthetic results tables, where the truth is known."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from helpers import synthetic_rows, table

from suite import analyse as analysis
from suite.analyse.claim_rule import Reason
from suite.analyse.fits import Fit, fit_power, floor_model, verdict

N = 2.0 ** np.arange(4, 21)  # 16 .. 1M: a floor up to n = 256, then 4096x of power law


def synthetic(p: float, seed: int, floor_at: float = 256.0, noise: float = 0.03, n=N) -> np.ndarray:
    """t = c·nᵖ with multiplicative noise, plus a constant floor equal to the power term at floor_at."""
    rng = np.random.default_rng(seed)
    c = 1e-9
    return c * n**p * (1 + noise * rng.standard_normal(len(n))) + c * floor_at**p


@pytest.mark.parametrize("p", [0.5, 1.0, 1.5, 2.0, 2.5])
def test_fit_recovers_the_exponent_within_005_under_3pct_noise_and_a_floor(p):
    for seed in range(20):
        fit = fit_power(N, synthetic(p, seed))
        assert abs(fit.slope - p) <= 0.05, (seed, fit)
        assert fit.excluded and max(fit.excluded) >= 256, "the flat small-n region must be detected"
        assert fit.span >= 16


def test_without_the_floor_exclusion_the_floor_biases_the_slope():
    """The floor detection is what makes the fit right: plain least squares on all points is far off."""
    plain = fit_power(N, synthetic(2.0, 0), exclude_floor=False)
    assert abs(plain.slope - 2.0) > 0.2


def test_a_pure_power_law_keeps_every_point():
    rng = np.random.default_rng(1)
    t = 3e-7 * N**1.5 * (1 + 0.01 * rng.standard_normal(len(N)))
    fit = fit_power(N, t)
    assert fit.excluded == () and fit.span == N[-1] / N[0]
    assert fit.lo <= 1.5 <= fit.hi


def test_the_95pct_interval_covers_the_true_exponent_about_95pct_of_the_time():
    n = 2.0 ** np.arange(8, 15)  # 7 points, 64x, as a grid has
    covered = sum(
        fit.lo <= 1.0 <= fit.hi
        for fit in (fit_power(n, synthetic(1.0, seed, floor_at=1.0, noise=0.05, n=n)) for seed in range(200))
    )
    assert 0.88 <= covered / 200 <= 0.995


def test_a_floor_is_taken_only_where_the_points_show_one():
    """Noise alone fits a small floor half the time; taking it cost a series its smallest lengths
    (and its 16x span) in one run and not the next. With the F test a floor-free series keeps them."""
    n = 2.0 ** np.arange(8, 13)  # 5 points, 16x: a quadratic kernel's ladder
    rng = np.random.default_rng(3)
    draws = [1e-9 * n**2 * np.exp(0.05 * rng.standard_normal(len(n))) for _ in range(200)]
    lost = sum(bool(fit_power(n, t).excluded) for t in draws)
    fitted = sum(floor_model(n, t)[0] > 0 for t in draws)
    assert fitted >= 60 and lost <= 16, (fitted, lost)  # a floor fitted to noise often, taken at most 8%


def test_a_series_that_is_all_floor_is_never_fitted_as_flat():
    """The CI failure of stop 23: a sleep with noise fitted floor + c·x^-0.01 (no floor), so the
    series' slope came out ~0 over 32x and was settled as refuted. It is all floor: no 16x span."""
    n = 2.0 ** np.arange(4, 10)
    rng = np.random.default_rng(0)
    for _ in range(200):
        t = 2e-3 * (1 + np.abs(0.03 * rng.standard_normal(len(n)))) + 3e-7 * (n / n[-1]) ** 2
        fit = fit_power(n, t)
        assert fit.span < 16 and verdict(fit, 2.0)[0] == "inconclusive", fit


def test_the_exponent_is_fitted_to_the_fastest_call_which_contention_cannot_lift():
    """Another program slowing some calls (a 2-3x slower sample in some cases) moves the medians, not
    the fastest calls: the fit on them recovers the exponent and keeps its interval narrow."""
    rng = np.random.default_rng(5)
    n = 2 ** np.arange(8, 15)
    rows = []
    for x in n:
        clean = 1e-9 * x**1.0 * np.exp(0.01 * rng.standard_normal(6))
        hit = rng.random(6) < 0.4
        samples = np.where(hit, clean * rng.uniform(2, 3, 6), clean)
        rows += [
            {**r, "time_s": float(np.median(samples)), "time_min_s": float(samples.min())}
            for r in synthetic_rows("linear", "native", {int(x): 0.0}, claimed=1.0)
        ]
    frame = pd.DataFrame(rows)
    fastest = analysis.exponents.exponents(frame, metrics=("time",)).iloc[0]
    assert fastest["verdict"] == "confirmed" and fastest["hi"] - fastest["lo"] < 0.1
    median = analysis.exponents.exponents(frame.assign(time_min_s=frame["time_s"]), metrics=("time",)).iloc[0]
    assert median["hi"] - median["lo"] > 2 * (fastest["hi"] - fastest["lo"])


def test_floor_model_recovers_floor_and_exponent_without_noise():
    floor, c, p = floor_model(N, 2e-4 + 1e-9 * N**2)
    assert p == pytest.approx(2.0, abs=0.01)
    assert floor == pytest.approx(2e-4, rel=0.05)


def test_fewer_than_three_points_is_no_fit_and_an_inconclusive_verdict():
    assert fit_power([256, 512], [1.0, 2.0]) is None
    assert verdict(None, 1.0)[0] == "inconclusive"


def _fit(lo, hi, used=(256, 4096)):
    return Fit(slope=(lo + hi) / 2, lo=lo, hi=hi, intercept=0.0, used=used)


@pytest.mark.parametrize(
    "lo, hi, expected",
    [
        (0.90, 1.10, "confirmed"),
        (0.86, 1.05, "confirmed"),
        (1.16, 1.30, "refuted"),
        (0.64, 0.84, "refuted"),
        (1.10, 1.20, "inconclusive"),
        (0.50, 1.50, "inconclusive"),
        (0.85, 1.15, "inconclusive"),
        (1.16, 1.40, "inconclusive"),  # wholly in or out, but wider than 0.2
    ],
)
def test_verdict_rule_of_claims_md(lo, hi, expected):
    assert verdict(_fit(lo, hi), 1.0)[0] == expected


def test_a_span_under_16x_is_inconclusive_whatever_the_interval():
    status, why = verdict(_fit(0.99, 1.01, used=(256, 2048)), 1.0)
    assert status == "inconclusive" and why.reason is Reason.SHORT_SPAN and "8x" in str(why)


def test_memory_has_no_claim():
    assert verdict(_fit(0.99, 1.01), None)[0] == "no claim"


def test_claims_table_confirms_the_structured_path_and_calls_the_masked_one_quadratic():
    claims = analysis.claims(analysis.all_exponents(table()))
    by = claims.set_index(["variant", "impl"])
    assert by.loc[("sliding_window", "native"), "verdict"] == "confirmed"
    assert by.loc[("sliding_window", "native"), "realizes"] == "yes"
    assert by.loc[("sliding_window", "sdpa"), "verdict"] == "refuted"
    assert by.loc[("sliding_window", "sdpa"), "realizes"].startswith("no")
    assert by.loc[("sliding_window", "sdpa"), "flops_slope"] == pytest.approx(2.0, abs=1e-6)
    assert by.loc[("full", "sdpa"), "verdict"] == "confirmed"


def test_diagnosis_names_the_implementations_quadratic_work():
    result = analysis.analyse(table())
    row = result.claims.set_index(["variant", "impl"]).loc[("sliding_window", "sdpa")]
    assert "grows as n^2.00, not as the algorithm's n^1" in row["diagnosis"]


def test_failed_cases_are_left_out_of_fits_and_counted_in_the_status_matrix():
    result = analysis.analyse(table())
    assert result.status.loc[("full", "sdpa"), "oom"] == 1
    assert result.status.loc[("full", "sdpa"), "ok"] == 7


def test_crossover_is_interpolated_between_measured_points():
    # window time 2e-5·n against full 1e-9·n²: equal at n = 20000, between 16384 and 32768; add 32768
    frame = table()
    extra = pd.DataFrame(
        synthetic_rows("full", "sdpa", {32768: 1e-9 * 32768**2}, claimed=2.0)
        + synthetic_rows("sliding_window", "native", {32768: 2e-5 * 32768}, claimed=1.0)
    )
    result = analysis.crossovers(pd.concat([frame, extra], ignore_index=True))
    row = result[(result["impl"] == "native") & (result["reference"] == "full/sdpa")].iloc[0]
    assert row["crossover_n"] == pytest.approx(20000, rel=0.01)
    never = result[(result["impl"] == "sdpa") & (result["reference"] == "full/sdpa")].iloc[0]
    assert np.isnan(never["crossover_n"]) and "slower at every measured n" in never["crossover"]


def test_efficiency_is_useful_flops_over_time_against_the_probe_peak_with_the_work_ratio():
    peaks = {"cpu": {"float32": {"flops_per_s": 1e11}}}
    eff = analysis.efficiency(table(), peaks)
    row = eff[(eff["variant"] == "sliding_window") & (eff["impl"] == "sdpa") & (eff["seq_len"] == 1024)].iloc[0]
    assert row["peak_share"] == pytest.approx(4 * 8 * 64 * 1024 / (1.1e-9 * 1024**2) / 1e11)  # useful FLOPs
    assert row["work_ratio"] == pytest.approx(1024)  # counted n² against the pattern's n¹: 1024x the work
    assert row["output_bytes"] == 8 * 1024 * 64 * 4  # B·H·n·d float32
    assert row["memory_ratio"] == pytest.approx(1e3 * 1024 / (8 * 1024 * 64 * 4))
    assert np.isnan(analysis.efficiency(table(), None)["peak_share"]).all()


def test_the_roofline_is_the_larger_of_the_compute_and_the_memory_time_for_each_byte_count():
    """A gather-bound row (1 GB of traffic at the probe's 1e10 bytes a second: a tenth of a second, ten times its FLOPs' at the peak)
    is memory-bound with its traffic and compute-bound with its compulsory bytes; a row without a
    traffic model, and a run without a bandwidth probe, have no bound (NaN), not a crash."""
    peaks = {"cpu": {"float32": {"flops_per_s": 1e11}}}
    bandwidth = {"cpu": {"bytes_per_s": 1e10, "cache_bytes_per_s": 7.5e10}}
    row = synthetic_rows("random", "native", {4096: 0.2}, claimed=1.0)[0]
    frame = pd.DataFrame(
        [
            {**row, "flops": 1e9, "traffic_bytes": 1e9, "compulsory_bytes": 1e7},
            {**row, "variant": "additive", "flops": 1e9, "traffic_bytes": None, "compulsory_bytes": 1e7},
        ]
    )
    eff = analysis.efficiency(frame, peaks, bandwidth).set_index("variant")
    gather = eff.loc["random"]
    assert gather["intensity_traffic"] == pytest.approx(1.0) and gather["intensity_compulsory"] == pytest.approx(100)
    assert gather["roofline_traffic_s"] == pytest.approx(0.1) and gather["roofline_traffic_binds"] == "memory"
    assert gather["roofline_traffic_share"] == pytest.approx(0.5)  # half the time measured
    assert gather["roofline_compulsory_s"] == pytest.approx(0.01) and gather["roofline_compulsory_binds"] == "compute"
    assert gather["roofline_compulsory_share"] == pytest.approx(0.05) and gather["bandwidth_bytes_per_s"] == 1e10
    assert gather["cache_bandwidth_bytes_per_s"] == 7.5e10  # the roofline figure's second memory ceiling
    unmodelled = eff.loc["additive"]
    assert np.isnan(unmodelled["roofline_traffic_share"]) and pd.isna(unmodelled["roofline_traffic_binds"])
    assert unmodelled["roofline_compulsory_share"] == pytest.approx(0.05)
    old = analysis.efficiency(pd.DataFrame([row]), peaks, {})  # an older run: no byte columns, no bandwidth
    assert old["roofline_traffic_share"].isna().all() and old["roofline_compulsory_binds"].isna().all()


def test_the_rooflines_compute_floor_counts_the_algorithms_products_and_not_its_elementwise_terms():
    """A feature map's product is work the algorithm cannot skip and a GEMM does at the peak: it joins
    `flops` in the compute floor (3x in fwd_bwd, as `flops` counts); the softmax's operations do not
    (stored as JSON, as the results keep them)."""
    peaks, bandwidth = {"cpu": {"float32": {"flops_per_s": 1e11}}}, {"cpu": {"bytes_per_s": 1e10}}
    row = {
        **synthetic_rows("performer", "native", {4096: 0.1}, claimed=1.0)[0],
        "flops": 1e9,
        "traffic_bytes": 1e6,
        "compulsory_bytes": 1e6,
        "extra_flops": json.dumps({"feature_map": 1e9, "normalizer": 5e8, "softmax": 4e9}),
    }
    frame = pd.DataFrame([row, {**row, "mode": "fwd_bwd"}])
    fwd, both = analysis.efficiency(frame, peaks, bandwidth).sort_values("mode").to_dict("records")
    assert fwd["product_flops"] == pytest.approx(2e9) and both["product_flops"] == pytest.approx(1e9 + 3e9)
    assert fwd["roofline_traffic_s"] == pytest.approx(0.02) and fwd["roofline_traffic_binds"] == "compute"
    assert fwd["roofline_traffic_share"] == pytest.approx(0.2) and both["roofline_traffic_share"] == pytest.approx(0.4)
    assert fwd["intensity_traffic"] == pytest.approx(2000)
    assert fwd["peak_share"] == pytest.approx(0.1)  # the share of peak stays on the claim's FLOPs alone
    assert fwd["all_terms_share"] == pytest.approx(0.65)  # every named term, the elementwise ones too


def test_the_speedup_its_flops_allow_beside_the_speedup_measured():
    """The window's FLOPs are n/257 times under full's at each n: that is its bound; measured, full's
    time over its own."""
    result = analysis.speedups(table())
    native = result[(result["impl"] == "native") & (result["reference"] == "full/sdpa")].set_index("seq_len")
    n = 4096.0
    assert native.at[n, "flops_bound"] == pytest.approx(n)  # synthetic FLOPs: n² against n
    assert native.at[n, "speedup"] == pytest.approx(1e-9 * n**2 / (2e-5 * n))
    assert set(native.index) == {256, 512, 1024, 2048, 4096, 8192, 16384}
    assert set(result[result["reference"] == "full/dense"]["seq_len"]) == {256, 512, 1024, 2048, 4096}


def test_the_share_with_every_term_adds_the_named_terms_and_their_backward_in_fwd_bwd():
    """linformer's projections are as many FLOPs as its attention: with them its share doubles, plus
    the softmax's operations; a fwd_bwd row counts the terms 3x, as its flops; no terms, no change."""
    peaks = {"cpu": {"float32": {"flops_per_s": 1e11}}}
    rows = synthetic_rows("linformer", "native", {4096: 1e-3}, claimed=1.0)
    attention = rows[0]["flops"]
    terms = {"projections": attention, "softmax": attention // 50}
    frame = pd.DataFrame(
        [
            {**rows[0], "extra_flops": json.dumps(terms)},
            {**rows[0], "mode": "fwd_bwd", "flops": 3 * attention, "extra_flops": terms},
            {**rows[0], "variant": "plain", "extra_flops": None},
        ]
    )
    eff = analysis.efficiency(frame, peaks).set_index(["variant", "mode"])
    fwd, both, plain = eff.loc[("linformer", "fwd")], eff.loc[("linformer", "fwd_bwd")], eff.loc[("plain", "fwd")]
    assert fwd["all_terms_share"] == pytest.approx(fwd["peak_share"] * (2 + 1 / 50), rel=1e-3)
    assert both["all_flops"] == pytest.approx(3 * (attention + sum(terms.values())))
    assert plain["all_terms_share"] == plain["peak_share"]


def test_a_profiled_call_s_operators_read_as_shares_of_its_time_largest_first():
    assert analysis.tables.op_shares(json.dumps({"mul": 1.0, "bmm": 3.0})) == {"bmm": 0.75, "mul": 0.25}
    assert analysis.tables.op_shares({"mm": 2e-3}) == {"mm": 1.0}
    assert analysis.tables.op_shares(None) is None and analysis.tables.op_shares(float("nan")) is None
    compiled = {
        "## Call CompiledFxGraph fa7x ##": 2.0,
        "## Call CompiledFxGraph fb9y ##": 1.0,
        "Torch-Compiled Region: 2/13": 0.5,
        "bmm": 0.5,
    }
    assert analysis.tables.op_shares(compiled) == {
        "compiled graph (inductor)": 0.75,
        "compiled region (dynamo)": 0.125,
        "bmm": 0.125,
    }
    rows = synthetic_rows("linformer", "native", {4096: 1e-3}, claimed=1.0)
    eff = analysis.efficiency(pd.DataFrame([{**rows[0], "op_seconds": {"bmm": 1.0}}]), None)
    assert eff["op_shares"].iloc[0] == {"bmm": 1.0}


def test_heads_axis_holds_the_kv_ratio_and_features_axis_reads_params():
    rows = []
    for h in (1, 2, 4, 8, 16):
        rows += synthetic_rows("full", "sdpa", {2048: 1e-3 * h}, claimed=2.0, num_heads=h, num_kv_heads=h)
    for m in (16, 64, 256, 1024):
        rows += [
            {**r, "approx_error": 2.0 / m**0.5, "params": json.dumps({"features": m})}
            for r in synthetic_rows("performer", "native", {4096: 1e-4 * m}, claimed=1.0)
        ]
    fits = analysis.all_exponents(pd.DataFrame(rows))
    heads = fits[(fits["axis"] == "num_heads") & (fits["metric"] == "time")].iloc[0]
    assert heads["slope"] == pytest.approx(1.0) and heads["verdict"] == "confirmed"
    error = fits[(fits["axis"] == "features") & (fits["metric"] == "error")].iloc[0]
    assert error["slope"] == pytest.approx(-0.5) and error["claimed"] == -0.5 and error["verdict"] == "confirmed"
    assert error["series"] == "native"
