"""Random gathers in the cost model: the run's measured rate for rows gathered at random (suite.machine.gathers)
stands in for the cache steps of an implementation that says its leading term is such gathers (Impl.gathers),
bounded by the leading term's own rate, and its verdicts on series planted with measured rates
(suite.analyse.planted.gather_study, benchmarks/gather_study.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import variants
from suite.analyse import cost, terms
from suite.analyse.claim_rule import Note
from suite.analyse.exponents import all_exponents
from suite.analyse.planted import HOSTS, KV_BYTES_PER_ROW, STEP_MAX, gather_study, gathered, lengths
from suite.analyse.steps import gather_rate, machine
from suite.machine import gathers
from suite.machine.probe import ROUNDS

STORED = Path(__file__).parents[3] / "tests" / "data" / "gather-probes"  # runs of the gather probe (its README)
PROBES = json.loads((STORED / "probes.json").read_text())["runs"]
X = lengths(256, 65536)
MIB = 1 << 20


def test_the_rate_is_read_at_a_heads_K_and_never_falls_past_its_least():
    probe = {"table_bytes": [MIB, 2 * MIB, 4 * MIB, 8 * MIB], "ns_per_pair": [6.0, 5.0, 8.0, 7.0]}
    got = gather_rate(probe, [MIB, 2 * MIB, 2**21.5, 4 * MIB, 8 * MIB, 11 * MIB])
    np.testing.assert_allclose(got, [6.0, 5.0, 6.25, 7.5, 7.5, 7.5])  # pooled past the least; the floor kept
    assert gather_rate(probe, [MIB, 12 * MIB]) is None  # past the probe's reach (half an octave)
    np.testing.assert_allclose(gather_rate(probe, [4 * MIB, 8 * MIB], monotone=False), [8.0, 7.0])
    for bad in (
        None,
        {},
        {"table_bytes": [1, 2], "ns_per_pair": [1.0, 0.0]},
        {"table_bytes": [1], "ns_per_pair": [1.0]},
    ):
        assert gather_rate(bad, [MIB]) is None


def test_random_and_bigbird_say_their_leading_term_is_random_gathers():
    natives = [variants.get(name).impls.get("native") for name in variants.names()]
    assert sorted(name for name, impl in zip(variants.names(), natives) if impl is not None and impl.gathers) == [
        "bigbird",
        "random",
    ]


def _fitted(y, rate=None):
    ws = X * KV_BYTES_PER_ROW
    return cost.judge(X, y, 1.0, machine(ws, HOSTS["amd"], STEP_MAX, rate), bootstrap=0)


def test_a_linear_series_at_the_gathers_rate_is_confirmed_where_the_steps_refute_it():
    """The same series: planted with one probe run's rate, fitted with another's; with the cache steps
    instead (the model before the gathers' term), its rise past L2 and L3 reads as n^1.5 or n²."""
    rng = np.random.default_rng(3)
    s = gathered(rng, gathers.fastest(PROBES[:3]), noise=0.005)
    with_rate = _fitted(s.y, gather_rate(gathers.fastest(PROBES[3:6]), s.working_set / 2))
    assert with_rate.verdict == "confirmed" and cost.GATHERS in with_rate.model.names
    assert "the gathers' rise" in terms.explain(with_rate, 1.0)
    assert _fitted(s.y).verdict == "refuted"


def test_the_gathers_term_is_bounded_by_the_leading_terms_rate():
    """A rise twice the probe's relative rise is more than random gathers can make of the leading term:
    the term is held at its bound and a higher term is needed."""
    g = gather_rate(PROBES[0], X * KV_BYTES_PER_ROW / 2)
    y = 1e-6 * X * (1 + 2 * (g / g.min() - 1))
    result = _fitted(y, g)
    coef = dict(zip(result.model.names, result.model.coef))
    assert coef[cost.GATHERS] == pytest.approx(cost.GATHERS_MAX * coef["n^1"], rel=1e-6)
    assert result.higher_needed


def test_the_study_on_planted_gathers():
    """benchmarks/gather_study.py measures every cell, 300 series each: here 40, each planted with the fastest of
    3 probe runs and fitted with the fastest of 3 others. A clean series is confirmed in ≥ 90% (the study: 97.7%),
    an n^1.5 of 30% is never confirmed; the cache steps alone refute a clean series in ≥ 80% (96.3%)."""
    assert gather_study(PROBES, 40)["confirmed"] >= 0.9
    assert gather_study(PROBES, 40, higher=1.5, higher_share=0.3, seed=1).get("confirmed", 0.0) == 0.0
    rng = np.random.default_rng(2)
    plants = [gathered(rng, gathers.fastest([PROBES[i] for i in rng.permutation(len(PROBES))[:3]])) for _ in range(20)]
    assert np.mean([_fitted(s.y).verdict == "refuted" for s in plants]) >= 0.8


def test_in_the_study_a_verdict_at_its_tests_level_climbs_as_the_ladder_does():
    """On the twelve probe runs to 262144 (tests/data/gather-probes/probes_long.json), a series whose higher
    term's test sits at its level takes the next doubling (benchmarks/gather_study.py measures how often, and how
    often the same series are confirmed before and after the climb); on the nine to 65536, none can."""
    long = json.loads((STORED / "probes_long.json").read_text())["runs"]
    assert min(r["lengths"][-1] for r in long) == 262144
    climbing = gather_study(long, 60, climb=True)
    before = climbing["first"].get("confirmed", 0) / 60
    assert climbing["climbed"] > 0 and climbing["confirmed"] >= 0.9 and climbing["confirmed"] > before, climbing
    assert gather_study(PROBES, 20, climb=True)["climbed"] == 0.0


def test_a_series_past_the_probes_reach_or_without_a_probe_says_the_steps_stand_in():
    probe = gathers.fastest(PROBES[:3])
    assert gather_rate(probe, [2**24 * 1.4]) is not None and gather_rate(probe, [2**24 * 1.5]) is None
    s = gathered(np.random.default_rng(3), probe, noise=0.005)
    hosts = terms.machines({"cpu_caches": HOSTS["amd"]}, {"cpu": {"bytes_per_s": 25e9, "cache_bytes_per_s": 75e9}})
    row = all_exponents(_frame(s.y, True), hosts).query("metric == 'time' and axis == 'seq_len'").iloc[0]
    assert row["why_notes"] == Note.NO_PROBE.value and "cache steps stand in" in row["why"]
    assert "gathers' rise" not in row["terms"]


def test_shards_probes_merge_by_the_furthest_reach():
    short = {"lengths": [256], "ns_per_pair": [1.0], "rounds": [], "note": "n"}
    long_a = {"lengths": [256, 362], "ns_per_pair": [6.0, 8.0], "rounds": [], "note": "n"}
    long_b = {"lengths": [256, 362], "ns_per_pair": [7.0, 7.5], "rounds": [], "note": "n"}
    assert gathers.fastest([None, short, long_a, {"error": "x"}, long_b])["ns_per_pair"] == [6.0, 7.5]
    assert "error" in gathers.fastest([None, {"error": "x"}])


def test_a_decode_step_is_no_series_of_random_gathers():
    from suite.plan.case import Case
    from suite.run import runner

    forward = Case("bigbird", "native", "cpu", "float32", "fwd", 1, 1024, 8, 8, 64, False)
    assert runner._gathers(forward) and not runner._gathers(Case(**{**forward.__dict__, "mode": "decode"}))


def _frame(y, said):
    return pd.DataFrame(
        [
            {
                "variant": "random",
                "impl": "native",
                "device": "cpu",
                "dtype": "float32",
                "mode": "fwd",
                "batch": 1,
                "seq_len": int(n),
                "num_heads": 8,
                "num_kv_heads": 8,
                "head_dim": 64,
                "causal": False,
                "params": "{}",
                "status": "ok",
                "time_s": t,
                "time_min_s": t,
                "peak_bytes": 1e6,
                "flops": 1e6 * n,
                "flops_counted": 1e6 * n,
                "claimed_exponent_n": 1.0,
                "kv_bytes": 8 * n * KV_BYTES_PER_ROW,
                "impl_gathers": said,
            }
            for n, t in zip(X, y)
        ]
    )


@pytest.mark.parametrize("said", [True, False, None])
def test_the_fits_take_the_gathers_rate_only_where_the_rows_say_so(said):
    s = gathered(np.random.default_rng(3), gathers.fastest(PROBES[:3]), noise=0.005)
    probe = gathers.fastest(PROBES[3:6])
    hosts = terms.machines(
        {"cpu_caches": HOSTS["amd"]}, {"cpu": {"bytes_per_s": 25e9, "cache_bytes_per_s": 75e9, "gathers": probe}}
    )
    assert hosts["cpu"]["gathers"] is probe
    row = all_exponents(_frame(s.y, said), hosts).query("metric == 'time' and axis == 'seq_len'").iloc[0]
    assert ("gathers' rise" in row["terms"]) == bool(said)


def test_the_probe_counts_ns_a_pair_of_every_head_to_the_runs_longest_case():
    seen = []

    def timer(fn, run_time, max_samples, min_samples, threads, warmed=None):
        fn()
        seen.append((threads, warmed is None))
        return [2e-3, 3e-3, 4e-3]  # the fastest call's time

    out = gathers.measure(timer, "cpu", 1, longest=300)
    assert out["lengths"] == [256, 362] and out["table_bytes"] == [256 * 256, 362 * 256]
    np.testing.assert_allclose(
        out["ns_per_pair"], [2e-3 / (gathers.HEADS * n * gathers.KEYS) * 1e9 for n in (256, 362)]
    )
    assert len(out["rounds"][0]) == ROUNDS == len(seen) // 2 and out["spread"] == 0.0
    assert seen[:2] == [(1, True)] * 2 and set(seen[2:]) == {(1, False)}  # warmed up in the first round alone
    assert gathers.lengths() == gathers.LENGTHS and gathers.lengths(100_000)[-2:] == (92682, 131072)


def test_the_processes_probes_are_one_by_each_lengths_fastest():
    runs = [
        {"lengths": [256, 362], "ns_per_pair": [6.0, 9.0], "rounds": [], "note": "n"},
        {"error": "killed"},
        {"lengths": [256, 362], "ns_per_pair": [5.0, 12.0], "rounds": [], "note": "n"},
    ]
    out = gathers.fastest(runs)
    assert out["ns_per_pair"] == [5.0, 9.0] and out["processes"] == [[6.0, 9.0], [5.0, 12.0]]
    assert out["spread"] == pytest.approx(1 / 3) and "fastest of 2 process(es)" in out["note"]
    assert gathers.fastest([{"error": "killed"}]) == {"error": "killed"}


class _Pool:
    """The runner's pool: a bandwidth probe, and each worker's gather probe (ns a pair falling with its replicate)."""

    def __init__(self):
        self.asked = []

    def bandwidth(self, device):
        return {"bytes_per_s": 1e10, "spread": 0.01, "kernel": "copy"}

    def gathers(self, device, replicate, longest):
        self.asked.append((replicate, longest))
        return {
            "lengths": [256, 512],
            "table_bytes": [65536, 131072],
            "ns_per_pair": [6.0 - replicate, 9.0],
            "rounds": [[6.0], [9.0]],
            "note": "n",
            "spread": 0.0,
        }


@pytest.mark.parametrize("variant, asked", [("random", [(0, 4096), (1, 4096)]), ("full", [])])
def test_the_run_probes_the_gathers_in_every_worker_where_a_case_gathers(tmp_path, variant, asked):
    from suite.plan.case import Case
    from suite.run import runner
    from suite.store.rundir import RunDir

    cases = [
        Case(variant, "native" if variant == "random" else "sdpa", "cpu", "float32", "fwd", 1, n, 8, 8, 64, False)
        for n in (1024, 4096)
    ]
    run, pool = RunDir(tmp_path), _Pool()
    with open(tmp_path / "log", "w") as log:
        runner._bandwidth(run, cases, pool, 2, log)
    found = run.bandwidth()["cpu"]
    assert pool.asked == asked and ("gathers" in found) == bool(asked)
    if asked:
        assert found["gathers"]["ns_per_pair"] == [5.0, 9.0] and found["gathers"]["processes"] == [
            [6.0, 9.0],
            [5.0, 9.0],
        ]


@pytest.mark.slow
def test_a_run_with_random_gathers_probes_them_in_each_worker_and_the_rows_say_so(tmp_path):
    """End to end: 2 replicates, the gather probe in both workers to the run's longest random case, and the
    rows' trait in the table."""
    from helpers import suite, write_grid

    grid = write_grid(
        tmp_path,
        '\nreplicates = 2\n[[block]]\nvariant = ["random", "full"]\nimpl = ["native", "sdpa"]\nseq_len = [256, 300]\n',
        name="g",
        probe=True,
    )
    text = (
        grid.read_text()
        .replace("\nreplicates = 2\n[[block]]", "\n[[block]]")
        .replace("[settings]\n", "[settings]\nreplicates = 2\n")
    )
    assert "memory_budget_gib = 1" in text and "replicates = 2" in text  # write_grid's budget for a probed run
    grid.write_text(text)
    res = suite("run", "--grid", str(grid), "--run-id", "g", "--results-dir", str(tmp_path / "r"), cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    found = json.loads((tmp_path / "r" / "g" / "bandwidth.json").read_text())["cpu"]["gathers"]
    assert found["lengths"] == [256, 362] and len(found["processes"]) == 2 and min(found["ns_per_pair"]) > 0
    assert "random gathers cpu" in res.stdout + res.stderr
    table = pd.read_parquet(tmp_path / "r" / "g" / "results.parquet")
    said = table.set_index(["variant", "impl"])["impl_gathers"]
    assert said.loc[("random", "native")].all() and not said.loc[("full", "sdpa")].any()


@pytest.mark.slow  # the whole report
def test_the_report_and_the_card_show_the_runs_gather_probe(tmp_path):
    import shutil

    from suite import cli
    from suite.machine import stream
    from suite.present.card import _gathers
    from suite.present.report import cache_levels, fmt_bytes
    from suite.store.rundir import RunDir

    shutil.copytree(Path(__file__).parents[2] / "fixtures" / "legacy" / "legacy-a", tmp_path / "results" / "g")
    probe = {**gathers.fastest(PROBES[:2]), "heads": 8, "keys": 33}
    run = RunDir(tmp_path / "results" / "g")
    sizes = [1 << 20 << k for k in range(11)]  # and the sweep of a Xeon VM whose sysfs reports a 480 MiB L3
    rates = [r * 1e9 for r in (32.6, 28.4, 27.5, 28.7, 28.7, 25.9, 18.4, 15.8, 15.4, 15.1, 15.0)]
    sweep = {
        "buffer_bytes": sizes,
        "bytes_per_s": rates,
        "rounds": [[r * 0.9, r, r * 1.01] for r in rates],
        "reach_bytes": stream.reach(sizes, rates),
    }
    run.write_json(RunDir.BANDWIDTH, {"cpu": {"gathers": probe, "sweep": sweep}})
    run.write_json(
        RunDir.ENV,
        {**run.env(), "cpu_caches": {"L1d": {"bytes": 48 << 10}, "L2": {"bytes": 2 << 20}, "L3": {"bytes": 480 << 20}}},
    )
    assert (
        cli.main(["report", "g", "--results-dir", str(tmp_path / "results"), "--reports-dir", str(tmp_path / "r")]) == 0
    )
    page = (tmp_path / "r" / "g" / "index.html").read_text()
    levels = "L1d 48 KiB, L2 2 MiB, L3 132 MiB (the sweep&#39;s reach; sysfs: 480 MiB)"
    assert 'id="sweep-cpu"' in page and "median over 3 interleaved rounds" in page and levels in page, page
    assert (
        "at 132 MiB of buffers" in page and '<td class="num">3 MiB</td>' in page and "29.3 GB/s – 32.9 GB/s" in page
    )  # 1 MiB's three, range
    assert cache_levels(run.env(), run.bandwidth()) == levels.replace("&#39;", "'")
    gpu_only = {**run.env(), "devices": ["cuda"]}  # env.json records the host's caches whatever the devices
    assert cache_levels(gpu_only, run.bandwidth()) == "none (no CPU device in this run)"
    assert [fmt_bytes(x) for x in (1000 << 20, 1023.6 * 2**20, 1.5 * 2**30, 48 << 10, 512)] == [
        "1000 MiB",
        "1024 MiB",
        "1.5 GiB",
        "48 KiB",
        "512 B",
    ]  # no "1e+03 MiB"
    older = {
        "buffer_bytes": sizes,
        "bytes_per_s": [15e9] * 11,
        "reach_bytes": None,
    }  # one reading a size, no level ends
    run.write_json(
        RunDir.BANDWIDTH, {"cpu": {"gathers": probe, "sweep": older}, "cuda": {"sweep": {"error": "OOM: x"}}}
    )
    assert (
        cli.main(["report", "g", "--results-dir", str(tmp_path / "results"), "--reports-dir", str(tmp_path / "r")]) == 0
    )
    page = (tmp_path / "r" / "g" / "index.html").read_text()
    assert "one reading" in page and "never falls by a quarter" in page and "L3 480 MiB." in page
    assert 'id="sweep-cuda"' in page and "The sweep failed (OOM: x)" in page
    assert 'id="gathers-cpu"' in page and "uniform random pattern of 33 keys a query" in page
    low, high = min(p[-1] for p in probe["processes"]), max(p[-1] for p in probe["processes"])
    assert f"{low:.2f} – {high:.2f}" in page  # each length's range over the processes
    assert _gathers({"cpu": {"gathers": probe}}).startswith("cpu 6.") and "fastest of 2 process(es)" in _gathers(
        {"cpu": {"gathers": probe}}
    )
