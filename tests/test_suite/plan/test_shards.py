"""Grids larger than one machine: shards cover each case exactly once, balanced by predicted cost."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from helpers import ROOT, suite

from suite.plan import grid as grids
from suite.plan import shard
from suite.plan.case import theory_of


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 400])
def test_shards_of_the_smoke_grid_cover_every_case_exactly_once(n):
    grid = grids.resolve("smoke")
    settings = grid.settings
    parts = shard.split(list(grid.cases), settings, n)
    ids = [case.case_id for part in parts for case in part]
    assert len(ids) == len(set(ids)) == len(grid.cases)
    assert parts == shard.split(list(grid.cases), settings, n), "deterministic"


def test_shards_are_balanced_by_predicted_cost_not_count():
    grid = grids.resolve("full")
    settings = grid.settings
    parts = shard.split(list(grid.cases), settings, 4, grid.ladders)
    loads = [sum(shard.predicted_s(c, settings) for c in part) for part in parts]
    units = [sum(shard.predicted_s(c, settings) for c in ladder.start()) for ladder in grid.ladders]
    assert max(loads) <= 1.1 * min(loads) + max(units + [shard.predicted_s(c, settings) for c in grid.cases])
    counts = [len(part) for part in parts]
    assert max(counts) - min(counts) > 2, "the heavy cases of the full grid make counts unequal"


@pytest.mark.parametrize("spec", ["0/3", "4/3", "x", "1/0", "", "1/3/5"])
def test_a_bad_shard_spec_is_refused_naming_it(spec):
    with pytest.raises(shard.ShardError, match="--shard"):
        shard.parse(spec)


@pytest.mark.slow
def test_a_bad_shard_spec_exits_2_before_any_work(tmp_path):
    res = suite("run", "--grid", "smoke", "--shard", "4/3", "--run-id", "x", cwd=tmp_path)
    assert res.returncode == 2 and "--shard '4/3'" in res.stderr and not (tmp_path / "results").exists()


# ---------------------------------------------------------------------------------------- Ray


def test_only_variants_keeps_a_block_whose_other_variants_have_impls_these_lack():
    """`--variant strided` on the pr grid: the block naming sliding_window's xformers is read as written, then
    narrowed (it was refused: 'xformers' not an impl of the chosen variants, stop 62)."""
    grid = grids.resolve("pr", devices=["cuda"], only_variants=["strided"])
    assert {c.variant for c in grid.cases} == {"strided"}
    assert {c.impl for c in grid.cases} == {"native", "sdpa", "flex"} and len(grid.cases) == 9


PRICING = """
import resource
from suite.plan import grid as grids, shard
grid = grids.parse({"block": [{"variant": ["full", "sliding_window", "fixed", "global"], "impl": ["native"],
                               "batch": [1], "num_heads": [1], "head_dim": [16], "seq_len": [2**24]}]}, "long")
shard.split(list(grid.cases)[:1], grid.settings, 2)  # the pricing code's own first use: imports, caches
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
costs = [shard.predicted_s(case, grid.settings) for case in grid.cases]
print(len(costs), min(costs) > 0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
"""


@pytest.mark.slow
def test_pricing_a_grid_of_long_sequences_allocates_nothing_its_lengths_size(tmp_path):
    """n = 2^24 (planning accepts it at B = H = 1, d = 16): a theory's row counts are arrays of n."""
    res = subprocess.run(
        [sys.executable, "-c", PRICING],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    count, positive, grown_kib = res.stdout.split()
    assert res.returncode == 0 and int(count) >= 3 and positive == "True", res.stderr
    assert int(grown_kib) < 32 * 1024, f"pricing grew the process by {int(grown_kib) // 1024} MiB"


def test_pricing_past_the_counted_length_follows_the_claim():
    grid = grids.parse(
        {"block": [{"variant": ["full", "sliding_window"], "impl": ["native"], "seq_len": [2**15]}]}, "t"
    )
    for case in grid.cases:
        exact = theory_of(case)["flops"]
        assert abs(shard._flops(case) / exact - 1) < 0.02, case.label()
