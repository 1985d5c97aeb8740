"""Adaptive lengths: a range of seq_len is climbed until the exponent settles, or stops saying why."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from suite.analyse.fits import fit_power
from suite.plan import grid as grids
from suite.plan import shard
from suite.plan.case import series_key
from suite.plan.ladder import Ladder
from suite.plan.settings import Settings
from suite.run.settle import advance

BUDGET = dict(width=0.2, max_call_s=10.0, memory_gib=16.0)


def _ladder(low=256, high=65536, step=2) -> Ladder:
    grid = grids.parse(
        {"block": [{"variant": ["linear"], "impl": ["native"], "seq_len": {"min": low, "max": high, "step": step}}]},
        "t",
    )
    return grid.ladders[0]


def _rows(n, t, claimed=1.0, peak=None, status=None) -> pd.DataFrame:
    n = np.asarray(n)
    return pd.DataFrame(
        {
            "seq_len": n,
            "time_s": t,
            "claimed_exponent_n": claimed,
            "reason": "",
            "peak_bytes": peak if peak is not None else 1e3 * n,
            "status": status if status is not None else ["ok"] * len(n),
        }
    )


def test_a_range_starts_with_a_16x_span_and_the_same_series_once():
    grid = grids.parse(
        {
            "block": [
                {"variant": ["linear", "performer"], "impl": ["native"], "seq_len": {"min": 256, "max": 65536}},
                {"variant": ["linear"], "impl": ["native"], "seq_len": "auto"},
            ]
        },
        "t",
    )
    assert len(grid.ladders) == 2, "the second block's linear series is the first's"
    lengths = sorted(c.seq_len for c in grid.cases if c.variant == "linear")
    assert lengths == [256, 512, 1024, 2048, 4096]
    assert _ladder(step=4).start()[-1].seq_len == 4096 and len(_ladder(step=4).start()) == 3


@pytest.mark.parametrize(
    "value,message",
    [
        ({"min": 256, "max": 1024}, "seq_len.max' = 1024 (allowed: at least 16x seq_len.min = 4096"),
        ({"min": 256, "max": 65536, "step": 3}, "seq_len.step' = 3 (allowed: 2, 4)"),
        ({"min": 0, "max": 65536}, "seq_len.min' = 0"),
        ({"low": 256, "max": 65536}, "seq_len.low' = 256 (allowed: min, max, step)"),
        ("all", "seq_len' = 'all'"),
    ],
)
def test_a_bad_range_names_the_field(value, message):
    with pytest.raises(grids.ConfigError, match=message.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        grids.parse({"block": [{"variant": ["linear"], "seq_len": value}]}, "t")


def test_a_series_is_known_by_its_fields_whatever_their_dtypes():
    ladder = _ladder()
    row = pd.Series(
        {
            **ladder.template.key,
            "params": "{}",
            "num_heads": 8.0,
            "head_dim": np.int64(64),
            "causal": np.bool_(False),
            "seq_len": 4096.0,
        }
    )
    assert series_key(row) == ladder.key


def test_a_clean_series_over_16x_with_a_narrow_interval_is_settled_once_its_midpoints_agree():
    def t(lengths):
        return 1e-6 * lengths * np.exp(np.random.default_rng(0).normal(0, 0.01, len(lengths)))

    n = 256 * 2.0 ** np.arange(5)
    first = advance(_ladder(), _rows(n, t(n)), **BUDGET)
    assert first.next is None and first.stop == "fill" and "degrees of freedom" in first.why
    assert first.fill == (360, 728, 1448), "5 lengths are too few for the cost model: the midpoints first"
    more = np.sort(np.append(n, first.fill))
    again = advance(_ladder(), _rows(more, t(more)), **BUDGET)
    assert again.stop == "settled" and again.why.startswith("confirmed") and again.fill == () and again.next is None


def test_a_5_point_settle_that_its_midpoints_widen_climbs_on():
    """Five lucky points inside 0.2; the midpoints show the scatter (the kind that flipped
    reformer-pytorch between two runs), so the series climbs instead of stopping."""
    n = 256 * 2.0 ** np.arange(5)
    first = advance(_ladder(), _rows(n, 1e-6 * n), **BUDGET)
    assert first.stop == "fill" and first.fill == (360, 728, 1448)
    more = np.sort(np.append(n, first.fill))
    scatter = {360: 0.25, 728: -0.25, 1448: 0.25}  # the midpoints land off the 5 points' line
    t = 1e-6 * more * np.exp([scatter.get(int(x), 0.0) for x in more])
    again = advance(_ladder(), _rows(more, t), **BUDGET)
    assert again.stop == "" and again.next == 8192


def test_an_overhead_floor_that_eats_the_span_climbs_on():
    n = 256 * 2.0 ** np.arange(5)
    t = 2e-3 + 1e-7 * n  # the floor is most of the cost up to n = 4096
    step = advance(_ladder(), _rows(n, t), **BUDGET)
    assert step.stop == "fill" and step.fill == (1448,), "too few lengths for the cost model: its midpoint first"
    more = np.sort(np.append(n, step.fill))
    step = advance(_ladder(), _rows(more, 2e-3 + 1e-7 * more), **BUDGET)
    assert step.next == 8192 and step.stop == ""


def test_the_max_stops_a_ladder_and_says_what_would_settle_it():
    n = 256 * 2.0 ** np.arange(5)
    step = advance(_ladder(high=4096), _rows(n, 2e-3 + 1e-7 * n), **BUDGET)
    assert step.stop == "max" and "n = 4096" in step.why and "more lengths would tell" in step.why


def test_a_call_predicted_too_long_stops_the_ladder():
    n = 256 * 2.0 ** np.arange(5)
    t = 8.0 * (n / n[-1]) * np.exp([0.0, 0.3, -0.3, 0.2, 0.0])  # noisy: the interval is too wide to settle
    step = advance(_ladder(), _rows(n, t, claimed=1.0), **BUDGET)
    assert step.stop == "time" and "n = 8192 would take ~" in step.why and "max_call_s = 10" in step.why


def test_memory_predicted_past_the_budget_stops_the_ladder():
    n = 256 * 2.0 ** np.arange(5)
    t = 1e-3 * (n / n[0]) * np.exp([0.0, 0.3, -0.3, 0.2, 0.0])
    step = advance(_ladder(), _rows(n, t, peak=12 * 2**30 * (n / n[-1]) ** 2, claimed=1.0), **BUDGET)
    assert step.stop == "memory" and "n = 8192 needs ~48 GiB" in step.why


def test_a_stop_short_of_settled_first_adds_the_midpoints_below_the_top_interval():
    """5 points leave a wide interval (t with 3 degrees of freedom); 3 cheap midpoints narrow it."""

    def t(lengths):  # half a second at 4096, so 8192 (4x) is past max_call_s; 8% noise, fixed per length
        return np.array(
            [
                0.5 * (x / 4096) ** 2 * np.exp(0.08 * np.random.default_rng(int(x) + 1).standard_normal())
                for x in lengths
            ]
        )

    budget = {**BUDGET, "max_call_s": 1.0}
    n = 256 * 2.0 ** np.arange(5)
    first = advance(_ladder(), _rows(n, t(n), claimed=2.0), **budget)
    assert first.stop == "time" and first.next is None and first.fill == (360, 728, 1448)
    more = np.sort(np.append(n, first.fill))
    again = advance(_ladder(), _rows(more, t(more), claimed=2.0), **budget)
    assert again.stop == "time" and again.fill == (), "midpoints once, never midpoints of midpoints"
    narrow, wide = fit_power(more, t(more)), fit_power(n, t(n))
    assert narrow.hi - narrow.lo < 0.8 * (wide.hi - wide.lo)


def test_a_failed_length_stops_the_ladder_with_its_reason():
    n = 256 * 2.0 ** np.arange(5)
    rows = _rows(n, 1e-6 * n, status=["ok"] * 4 + ["oom"])
    rows.loc[4, "reason"] = "out of memory at 4096"
    step = advance(_ladder(), rows, **BUDGET)
    assert step.stop == "failed" and step.why.startswith("n = 4096 oom (out of memory at 4096…): ")
    # a series out of memory at 4096 before any midpoint: its interval wide on 5 points
    assert step.fill == (360, 728), "the lengths that ran get their midpoints, below their top interval"


def test_a_ladder_goes_whole_to_one_shard():
    grid = grids.parse(
        {
            "block": [
                {
                    "variant": ["linear", "performer", "sliding_window", "global"],
                    "impl": ["native"],
                    "seq_len": {"min": 256, "max": 65536},
                }
            ]
        },
        "t",
    )
    parts = shard.split(list(grid.cases), Settings(), 3, grid.ladders)
    for ladder in grid.ladders:
        holders = [i for i, part in enumerate(parts) if any(c.case_id == ladder.template.case_id for c in part)]
        held = [c for c in parts[holders[0]] if series_key(c.key) == ladder.key]
        assert len(holders) == 1 and len(held) == 5


def test_midpoints_an_implementation_cannot_run_move_to_lengths_it_runs_not_failed():
    """reformer-pytorch needs n a multiple of 128: a midpoint of 360 would be skipped, and the skip would stop
    the ladder as failed, leaving its verdict on 5 points. Each moves to the nearest multiple it runs, between
    the same neighbours."""
    from suite.run import climb

    grid = grids.parse(
        {
            "block": [
                {
                    "variant": ["reformer", "linear"],
                    "impl": ["reformer-pytorch", "native"],
                    "seq_len": {"min": 256, "max": 65536},
                }
            ]
        },
        "t",
    )
    n = 256 * 2.0 ** np.arange(5)
    rows = _rows(n, 0.5 * (n / 4096) * np.exp([0.0, 0.3, -0.3, 0.2, 0.0]), claimed=1.0)
    by_impl = {ladder.template.impl: ladder for ladder in grid.ladders}
    settings = Settings(max_call_s=0.6, ladder_width=0.2)
    peer = climb._step(by_impl["reformer-pytorch"], rows, settings)
    ours = climb._step(by_impl["native"], rows, settings)
    assert peer.stop == ours.stop == "time" and ours.fill == (360, 728, 1448) and peer.fill == (384, 768, 1408)
    assert all(n[i] < m < n[i + 1] for i, m in enumerate(peer.fill)), "each between the same neighbours"


def test_a_ladder_starts_with_the_span_a_verdict_needs():
    """The plan stage keeps its own copy of the verdict's span (it imports no analysis): the two agree."""
    from suite.analyse import fits
    from suite.plan import ladder

    assert ladder.MIN_SPAN == fits.MIN_SPAN


ROWS = "tests/data/cpu-full-rows"  # fixed/native's and reformer/native's rows of a full run (its README)
SDPA_ROWS = "tests/data/amd-full-sdpa-rows"  # full/sdpa's rows of a full run that stopped one length short
MHA_ROWS = "tests/data/amd-mha-fused-rows"  # mha_fused/native's rows of a full run, stopped on time at 8192
INTEL_ROWS = (
    "tests/data/intel-conv-rows"  # conv/native's and sliding_window/sdpa's rows of a full run on the second host kind
)


def _stored_series(variant: str, impl: str, run: str):
    """A stored full run's series (RUN: a folder from the repository's root, a trimmed fixture under tests/data
    whose README says what it holds: B = 1, H = 8, d = 64) and the run's caches."""
    from pathlib import Path

    from suite.analyse.terms import machines
    from suite.store.rundir import RunDir

    run = RunDir(Path(__file__).resolve().parents[3] / run)
    df = run.read_table()
    rows = df[
        (df["variant"] == variant)
        & (df["impl"] == impl)
        & (df["mode"] == "fwd")
        & ~df["causal"].astype(bool)
        & (df["num_heads"] == 8)
        & (df["head_dim"] == 64)
        & (df["params"] == "{}")
    ]
    return rows, machines(run.env(), run.bandwidth())


def test_a_series_stopped_by_time_one_length_short_of_a_verdict_gets_its_top_intervals_midpoint():
    """A full run's full/sdpa rows (SDPA_ROWS), stopped at 4096 with 8192 predicted past max_call_s and its
    midpoints measured: 8 lengths leave the cost model too few degrees of freedom for a verdict. The top
    interval's midpoint costs half the top call and gives it the one it lacks."""
    ladder = grids.parse(
        {"block": [{"variant": ["full"], "impl": ["sdpa"], "seq_len": {"min": 256, "max": 65536}}]}, "t"
    ).ladders[0]
    rows, hosts = _stored_series("full", "sdpa", SDPA_ROWS)
    assert sorted(rows["seq_len"]) == [256, 360, 512, 728, 1024, 1448, 2048, 4096]
    step = advance(ladder, rows, width=0.2, max_call_s=1.5, memory_gib=16.0, hosts=hosts)
    assert step.stop == "time" and "degrees of freedom" in step.why and step.fill == (2896,)
    top = rows[rows["seq_len"] == 4096]
    assert advance(ladder, rows, width=0.2, max_call_s=0.1, memory_gib=16.0, hosts=hosts).fill == (), (
        "a midpoint predicted past max_call_s is not timed"
    )
    at = {2048: float(rows.loc[rows["seq_len"] == 2048, "time_min_s"].iloc[0]), 4096: float(top["time_min_s"].iloc[0])}
    more = pd.concat([rows, top.assign(seq_len=2896, time_min_s=(at[2048] * at[4096]) ** 0.5)])  # on the curve
    again = advance(ladder, more, width=0.2, max_call_s=1.5, memory_gib=16.0, hosts=hosts)
    assert again.stop == "settled" and again.why.startswith("confirmed") and again.fill == ()


def test_a_series_whose_overheads_still_hide_its_claim_climbs_to_stretch_call_s_and_no_other_does():
    """A full run's mha_fused/native rows (MHA_ROWS), stopped on time at 8192 with "the overheads still hide
    n^2": stretch_call_s lets that series take one more length (and a series whose rise may be a step at the
    span's top edge: the test below), not one that lacks lengths in its span (full/sdpa)."""
    ladder = grids.parse(
        {"block": [{"variant": ["mha_fused"], "impl": ["native"], "seq_len": {"min": 256, "max": 65536}}]}, "t"
    ).ladders[0]
    rows, hosts = _stored_series("mha_fused", "native", MHA_ROWS)
    budget = dict(width=0.2, max_call_s=1.5, memory_gib=16.0, hosts=hosts)
    held = advance(ladder, rows, **budget)
    assert held.stop == "time" and "still hide n^2" in held.why and "stretch_call_s" not in held.why
    assert advance(ladder, rows, **budget, stretch_call_s=8.0).next == 16384
    short = advance(ladder, rows, **budget, stretch_call_s=3.0)
    assert short.stop == "time" and "stretch_call_s = 3" in short.why
    ladder = grids.parse(
        {"block": [{"variant": ["full"], "impl": ["sdpa"], "seq_len": {"min": 256, "max": 65536}}]}, "t"
    ).ladders[0]
    rows, hosts = _stored_series("full", "sdpa", SDPA_ROWS)
    step = advance(ladder, rows, **{**budget, "hosts": hosts}, stretch_call_s=8.0)
    assert step.stop == "time" and "degrees of freedom" in step.why and "stretch_call_s" not in step.why


def test_fixed_natives_tile_path_is_judged_alone_and_asks_for_its_top_midpoint():
    """A full run's rows (ROWS): fixed/native runs its union path to 11584, whose time per row dips at each power
    of two, and its tile from 16384 to 262144. On the tile alone n^1.5 is needed, and its eight lengths ask for a
    ninth, the top interval's midpoint, within the full grid's stretch_call_s: with it, confirmed."""
    from suite.analyse import terms

    rows, hosts = _stored_series("fixed", "native", ROWS)
    rows = rows[rows["status"] == "ok"]
    before = rows[rows["seq_len"] != 185360]  # the ladder's rows when it stopped at the range's max
    result = terms.judge_series(
        before.groupby("seq_len")["time_min_s"].min(), before, "seq_len", 1.5, hosts, bootstrap=0
    )
    assert result.alone == 16384 and result.need_p < 0.05, result.why
    assert result.verdict == "inconclusive" and "more lengths would tell" in result.why
    ladder = grids.parse(
        {"block": [{"variant": ["fixed"], "impl": ["native"], "seq_len": {"min": 256, "max": 262144}}]}, "t"
    ).ladders[0]
    step = advance(ladder, before, width=0.2, max_call_s=1.5, memory_gib=16.0, hosts=hosts, stretch_call_s=8.0)
    assert step.stop == "max" and step.fill == (185360,), step
    assert advance(ladder, before, width=0.2, max_call_s=1.5, memory_gib=16.0, hosts=hosts).fill == (), (
        "without a stretch, a midpoint past max_call_s is not timed"
    )
    after = terms.judge_series(rows.groupby("seq_len")["time_min_s"].min(), rows, "seq_len", 1.5, hosts, bootstrap=0)
    assert after.verdict == "confirmed" and after.alone == 16384, after.why


def test_a_rise_that_may_be_a_step_at_the_spans_edge_climbs_on_within_stretch_call_s():
    """reformer/native stopped at 32768 in a full run (ROWS): a term n^1.5 needed unless the working set's nearing
    L3 is a step, and 65536 predicted past max_call_s. Longer lengths are what tell the two apart, so the ladder
    climbs on within stretch_call_s, as for a leading term the overheads still hide; without a stretch it stops."""
    rows, hosts = _stored_series("reformer", "native", ROWS)
    ladder = grids.parse(
        {"block": [{"variant": ["reformer"], "impl": ["native"], "seq_len": {"min": 256, "max": 262144}}]}, "t"
    ).ladders[0]
    kept = advance(ladder, rows, width=0.2, max_call_s=1.5, memory_gib=16.0, hosts=hosts)
    assert kept.stop == "time" and "unless the working set's nearing L3" in kept.why, kept
    step = advance(ladder, rows, width=0.2, max_call_s=1.5, memory_gib=16.0, hosts=hosts, stretch_call_s=8.0)
    assert step.stop == "" and step.next == 65536, step


ROWS_2 = "tests/data/cpu-full-rows-2"  # reformer/native's and mha_fused/native's rows of a second full run
ROWS_3 = "tests/data/cpu-full-rows-3"  # conv/native's rows of a third full run


def test_a_verdict_whose_higher_term_test_is_at_its_level_climbs_on_within_stretch_call_s():
    """reformer/native at 32768 in a full run (ROWS_2): confirmed, with n^2 left out at a p just past the level
    0.01. A verdict that the next length may turn climbs on within stretch_call_s; mha_fused/native, confirmed
    with no higher term near its level, stops."""
    from suite.analyse import terms

    rows, hosts = _stored_series("reformer", "native", ROWS_2)
    result = terms.judge_series(rows.groupby("seq_len")["time_min_s"].min(), rows, "seq_len", 1.0, hosts, bootstrap=0)
    assert result.verdict == "confirmed" and 0.01 <= result.higher_p < 0.05 and result.higher_share > 0.05, result
    ladder = grids.parse(
        {"block": [{"variant": ["reformer"], "impl": ["native"], "seq_len": {"min": 256, "max": 262144}}]}, "t"
    ).ladders[0]
    budget = dict(width=0.2, max_call_s=1.5, memory_gib=16.0, hosts=hosts)
    held = advance(ladder, rows, **budget)
    assert held.stop == "time" and "n = 65536 would take" in held.why, held
    assert advance(ladder, rows, **budget, stretch_call_s=8.0).next == 65536
    rows, hosts = _stored_series("mha_fused", "native", ROWS_2)
    ladder = grids.parse(
        {"block": [{"variant": ["mha_fused"], "impl": ["native"], "seq_len": {"min": 256, "max": 65536}}]}, "t"
    ).ladders[0]
    step = advance(ladder, rows, **{**budget, "hosts": hosts}, stretch_call_s=8.0)
    assert step.stop == "time" and "stretch_call_s" not in step.why, step


def test_a_verdict_at_its_tests_level_does_not_settle_however_narrow_its_power_law():
    """conv/native at 8192 in a full run (ROWS_3), confirmed with its n^1.5 test between the levels and the power
    law narrow: the next length may turn that verdict, so the series climbs on, and where it stops on time, says
    that its higher term's test is at its level."""
    from suite.analyse import terms

    rows, hosts = _stored_series("conv", "native", ROWS_3)
    rows = rows[rows["status"] == "ok"]
    result = terms.judge_series(rows.groupby("seq_len")["time_min_s"].min(), rows, "seq_len", 1.0, hosts, bootstrap=0)
    assert result.verdict == "confirmed" and 0.002 <= result.higher_p < 0.05 and result.higher_share >= 0.05, result
    ladder = grids.parse(
        {"block": [{"variant": ["conv"], "impl": ["native"], "seq_len": {"min": 256, "max": 65536}}]}, "t"
    ).ladders[0]
    budget = dict(width=0.2, max_call_s=1.5, memory_gib=16.0, hosts=hosts)
    assert advance(ladder, rows, **budget).next == 16384
    held = advance(ladder, rows, **{**budget, "max_call_s": 0.05})
    assert (
        held.stop == "time"
        and "higher term's test at its level (n^1.5: p = 0.027, 12% of the time)" in held.why
        and "longer lengths" in held.why
        and "~0.13 s a call" in held.why
    ), held


def test_a_refutation_its_power_law_contests_climbs_on():
    """conv/native's rows to 4096 of a full run on the second host kind (INTEL_ROWS) read refuted by its n^1.5
    test while its power law reaches the claim's 1 ± 0.15. Such a series climbs on, and where it stops on time, says
    both readings; a refutation its power law shares (sliding_window/sdpa, n^2) settles."""
    rows, hosts = _stored_series("conv", "native", INTEL_ROWS)
    rows = rows[(rows["status"] == "ok") & (rows["seq_len"] <= 4096)]
    ladder = grids.parse(
        {"block": [{"variant": ["conv"], "impl": ["native"], "seq_len": {"min": 256, "max": 65536}}]}, "t"
    ).ladders[0]
    budget = dict(width=0.2, max_call_s=1.5, memory_gib=16.0, hosts=hosts)
    assert advance(ladder, rows, **budget).next == 8192
    held = advance(ladder, rows, **{**budget, "max_call_s": 0.05})
    assert (
        held.stop == "time"
        and "refuted by its higher term's test (n^1.5: p = 0.0048, 55% of the time)" in held.why
        and "reaches the claim's 1 ± 0.15" in held.why
        and "longer lengths would tell" in held.why
    ), held
    rows, hosts = _stored_series("sliding_window", "sdpa", INTEL_ROWS)
    dense = grids.parse(
        {"block": [{"variant": ["sliding_window"], "impl": ["sdpa"], "seq_len": {"min": 256, "max": 65536}}]}, "t"
    ).ladders[0]
    assert advance(dense, rows[rows["status"] == "ok"], **{**budget, "hosts": hosts}).stop == "settled"
