"""Grids larger than one machine: shards cover each case once and merge back; Ray runs the same cases."""

from __future__ import annotations

import json
import os
import shutil
import signal
import time

import pandas as pd
import pytest

from suite.plan import grid as grids
from suite.plan import shard
from test_runner import suite, suite_in_process, write_grid

SMALL = """
[[block]]
variant = ["full", "sliding_window", "linear"]
impl = ["sdpa", "native", "dense"]
seq_len = [16, 32]
[[block]]
variant = ["fault_raise", "fault_exit"]
impl = ["native"]
"""


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


def test_a_bad_shard_spec_exits_2_before_any_work(tmp_path):
    res = suite("run", "--grid", "smoke", "--shard", "4/3", "--run-id", "x", cwd=tmp_path)
    assert res.returncode == 2 and "--shard '4/3'" in res.stderr and not (tmp_path / "results").exists()


CLIMB = """
[[block]]   # adaptive lengths whose choice does not depend on the machine: a 2 ms wait is all floor,
variant = ["paced"]    # so the span above it never reaches 16x and the ladders climb to their max
impl = ["sdpa"]
num_heads = [1]        # at n = 512 the attention itself is under 0.3 ms of the 2.3 ms
head_dim = [8, 16]
seq_len = { min = 16, max = 512 }
"""


def test_merged_shards_equal_the_unsharded_run_and_shards_of_other_grids_are_refused(tmp_path):
    """Ladders (adaptive lengths) go whole to a shard, climb there, and merge back with their decisions."""
    grid = write_grid(tmp_path, SMALL + CLIMB, name="sh")
    results = tmp_path / "results"
    common = ("--grid", str(grid), "--plugin", "fault_variants", "--results-dir", str(results))
    for k in (1, 2, 3):
        res = suite("run", *common, "--shard", f"{k}/3", "--run-id", f"s{k}", cwd=tmp_path)
        assert res.returncode == 0, res.stderr
    res = suite_in_process("merge", "s1", "s3", "s2", "--run-id", "merged", "--results-dir", str(results),
                           "--no-report", cwd=tmp_path)
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
    res = suite("run", "--grid", str(other), "--plugin", "fault_variants", "--results-dir", str(results),
                "--shard", "2/3", "--run-id", "o2", cwd=tmp_path)
    assert res.returncode == 0
    res = suite_in_process("merge", "s1", "o2", "--run-id", "bad", "--results-dir", str(results), cwd=tmp_path)
    assert res.returncode == 2 and "not shards of one grid" in res.stderr
    assert not (results / "bad").exists()

    shutil.copytree(results / "s2", results / "s2x")  # the same shard, from another machine
    env = json.loads((results / "s2x" / "env.json").read_text())
    (results / "s2x" / "env.json").write_text(json.dumps({**env, "fingerprint_id": "other", "cpu_model": "X"}))
    res = suite_in_process("merge", "s1", "s2x", "s3", "--run-id", "m", "--results-dir", str(results), cwd=tmp_path)
    assert res.returncode == 2 and "different machines" in res.stderr


# ---------------------------------------------------------------------------------------- Ray
ray = pytest.importorskip("ray", reason="the Ray executor's tests need the [ray] extra")


def test_smoke_grid_on_a_local_ray_cluster_matches_the_local_executor(tmp_path):
    """Three variants of the smoke grid (every implementation of each, skipped ones included)."""
    results = tmp_path / "results"
    for executor in ("local", "ray"):
        extra = ("--executor", "ray", "--ray-workers", "2") if executor == "ray" else ()
        res = suite("run", "--grid", "smoke", "--variant", "sliding_window,linear,gqa", "--run-id", executor,
                    "--results-dir", str(results), "--no-report", *extra, cwd=tmp_path, timeout=900)
        assert res.returncode == 0, res.stderr[-3000:]
    local, on_ray = (pd.read_parquet(results / name / "results.parquet") for name in ("local", "ray"))
    assert list(local["case_id"]) == list(on_ray["case_id"])
    assert dict(zip(local["case_id"], local["status"])) == dict(zip(on_ray["case_id"], on_ray["status"]))
    pids = {row["pid"] for row in map(json.loads, (results / "ray" / "journal.jsonl").read_text().splitlines())
            if "pid" in row}
    assert len(pids) == 2, "two Ray actors measured the cases"
    assert json.loads((results / "ray" / "probe.json").read_text())["cpu"]["float32"]["flops_per_s"] > 0
    assert json.loads((results / "ray" / "bandwidth.json").read_text())["cpu"]["bytes_per_s"] > 0


def test_a_ray_worker_killed_mid_run_loses_no_finished_case(tmp_path):
    body = SMALL.replace('seq_len = [16, 32]', 'seq_len = [16, 32, 48, 64]')
    grid = write_grid(tmp_path, body, name="rk")
    results = tmp_path / "results"
    journal = results / "rk" / "journal.jsonl"
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": f"{os.path.dirname(__file__)}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.Popen([sys.executable, "-m", "suite", "run", "--grid", str(grid), "--plugin", "fault_variants",
                             "--run-id", "rk", "--results-dir", str(results), "--no-report", "--executor", "ray",
                             "--ray-workers", "2"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while time.time() < deadline and (not journal.is_file() or len(journal.read_text().splitlines()) < 4):
        time.sleep(0.2)
    rows = [json.loads(line) for line in journal.read_text().splitlines()]
    before = {(row["case_id"], row.get("replicate", 0)): row for row in rows}
    victim = next(row["pid"] for row in rows if "pid" in row)
    os.kill(victim, signal.SIGKILL)  # a Ray worker, killed from outside, mid-run
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    after = {(row["case_id"], row.get("replicate", 0)): row for row in map(json.loads, journal.read_text().splitlines())}
    for key, row in before.items():
        assert after[key] == row, "a finished case was lost or changed"
    table = pd.read_parquet(results / "rk" / "results.parquet")
    assert "not_run" not in set(table["status"])
    faults = table[table["variant"].str.startswith("fault_")].set_index("variant")["status"]
    assert faults["fault_raise"] == "error" and faults["fault_exit"] == "error"
    assert (table[~table["variant"].str.startswith("fault_")]["status"].isin(["ok", "error"])).all()
