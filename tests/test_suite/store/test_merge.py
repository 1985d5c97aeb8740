"""Shards of a grid merge back into the run the unsharded grid makes; shards of other grids are refused."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest
from helpers import SMALL, suite, suite_in_process, write_grid

CLIMB = """
[[block]]   # adaptive lengths whose choice does not depend on the machine: a 2 ms wait is all floor,
variant = ["paced"]    # so the span above it never reaches 16x and the ladders climb to their max
impl = ["sdpa"]
num_heads = [1]        # at n = 512 the attention itself is under 0.3 ms of the 2.3 ms
head_dim = [8, 16]
seq_len = { min = 16, max = 512 }
"""

pytestmark = pytest.mark.slow  # subprocess sweeps (the fast lane: pytest -m "not slow")


def test_merged_shards_equal_the_unsharded_run_and_shards_of_other_grids_are_refused(tmp_path):
    """Ladders (adaptive lengths) go whole to a shard, climb there, and merge back with their decisions."""
    grid = write_grid(tmp_path, SMALL + CLIMB, name="sh")
    results = tmp_path / "results"
    common = ("--grid", str(grid), "--plugin", "fault_variants", "--results-dir", str(results))
    for k in (1, 2, 3):
        res = suite("run", *common, "--shard", f"{k}/3", "--run-id", f"s{k}", cwd=tmp_path)
        assert res.returncode == 0, res.stderr
    res = suite_in_process(
        "merge", "s1", "s3", "s2", "--run-id", "merged", "--results-dir", str(results), "--no-report", cwd=tmp_path
    )
    assert res.returncode == 0, res.stderr
    res = suite("run", *common, "--run-id", "whole", cwd=tmp_path)
    merged, whole = (pd.read_parquet(results / name / "results.parquet") for name in ("merged", "whole"))
    held = json.loads((results / "merged" / "plan.json").read_text())["grid_cases_held"]
    assert list(merged["case_id"])[:held] == list(whole["case_id"])[:held], "the grid's cases, in its order"
    assert sorted(merged["case_id"][held:]) == sorted(whole["case_id"][held:]), "then the lengths ladders added"
    assert dict(zip(merged["case_id"], merged["status"])) == dict(zip(whole["case_id"], whole["status"]))
    assert json.loads((results / "merged" / "plan.json").read_text())["complete"] is True
    # all floor: the fit keeps 128-512, and 184 (the midpoint below the top interval) is added at the max
    assert sorted(merged.loc[merged["variant"] == "paced", "seq_len"]) == sorted(2 * [16, 32, 64, 128, 184, 256, 512])
    stops = json.loads((results / "merged" / "ladders.json").read_text())["ladders"]
    assert len(stops) == 2 and {s["stop"] for s in stops} == {"max"}

    other = write_grid(tmp_path, SMALL.replace("seq_len = [16, 32]", "seq_len = [16, 48]"), name="sh")
    res = suite(
        "run",
        "--grid",
        str(other),
        "--plugin",
        "fault_variants",
        "--results-dir",
        str(results),
        "--shard",
        "2/3",
        "--run-id",
        "o2",
        cwd=tmp_path,
    )
    assert res.returncode == 0
    res = suite_in_process("merge", "s1", "o2", "--run-id", "bad", "--results-dir", str(results), cwd=tmp_path)
    assert res.returncode == 2 and "not shards of one grid" in res.stderr
    assert not (results / "bad").exists()

    shutil.copytree(results / "s2", results / "s2x")  # the same shard, from another machine
    env = json.loads((results / "s2x" / "env.json").read_text())
    (results / "s2x" / "env.json").write_text(json.dumps({**env, "fingerprint_id": "other", "cpu_model": "X"}))
    res = suite_in_process("merge", "s1", "s2x", "s3", "--run-id", "m", "--results-dir", str(results), cwd=tmp_path)
    assert res.returncode == 2 and "different machines" in res.stderr
