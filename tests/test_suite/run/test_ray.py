"""The Ray executor runs the same cases as the local one, and a worker killed mid-run loses no finished case."""

from __future__ import annotations

import json
import os
import signal
import time

import pandas as pd
import pytest
from helpers import SMALL, TESTS, preset_copy, suite, write_grid

pytestmark = pytest.mark.slow  # a local Ray cluster (the fast lane: pytest -m "not slow")
ray = pytest.importorskip("ray", reason="the Ray executor's tests need the [ray] extra")


def test_smoke_grid_on_a_local_ray_cluster_matches_the_local_executor(tmp_path):
    """Two variants of the smoke grid, every implementation of each (dense, SDPA, compiled flex, native,
    decode, and skipped ones). NB: not sliding_window too: its flex compiles would be most of each run."""
    results = tmp_path / "results"
    for executor in ("local", "ray"):  # NB: the local run without the probes: only the Ray run's are read
        extra = ("--executor", "ray", "--ray-workers", "2") if executor == "ray" else ()
        # NB: a 1 GiB budget: the bandwidth probe's memory-level buffers are a quarter of it or less, and the
        # probe's time with them
        grid = str(preset_copy("smoke", tmp_path / executor, memory_budget_gib=1, probe=executor == "ray"))
        res = suite(
            "run",
            "--grid",
            grid,
            "--variant",
            "linear,gqa",
            "--run-id",
            executor,
            "--results-dir",
            str(results),
            "--no-report",
            *extra,
            cwd=tmp_path,
            timeout=900,
        )
        assert res.returncode == 0, res.stderr[-3000:]
    local, on_ray = (pd.read_parquet(results / name / "results.parquet") for name in ("local", "ray"))
    assert list(local["case_id"]) == list(on_ray["case_id"])
    assert dict(zip(local["case_id"], local["status"])) == dict(zip(on_ray["case_id"], on_ray["status"]))
    pids = {
        row["pid"]
        for row in map(json.loads, (results / "ray" / "journal.jsonl").read_text().splitlines())
        if "pid" in row
    }
    assert len(pids) == 2, "two Ray actors measured the cases"
    assert json.loads((results / "ray" / "probe.json").read_text())["cpu"]["float32"]["flops_per_s"] > 0
    assert json.loads((results / "ray" / "bandwidth.json").read_text())["cpu"]["bytes_per_s"] > 0


def test_a_ray_worker_killed_mid_run_loses_no_finished_case(tmp_path):
    body = SMALL.replace("seq_len = [16, 32]", "seq_len = [16, 32, 48, 64]")
    grid = write_grid(tmp_path, body, name="rk")
    results = tmp_path / "results"
    journal = results / "rk" / "journal.jsonl"
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": f"{TESTS}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "suite",
            "run",
            "--grid",
            str(grid),
            "--plugin",
            "fault_variants",
            "--run-id",
            "rk",
            "--results-dir",
            str(results),
            "--no-report",
            "--executor",
            "ray",
            "--ray-workers",
            "2",
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.time() + 300
    while time.time() < deadline and (not journal.is_file() or len(journal.read_text().splitlines()) < 4):
        time.sleep(0.2)
    rows = [json.loads(line) for line in journal.read_text().splitlines()]
    before = {(row["case_id"], row.get("replicate", 0)): row for row in rows}
    victim = next(row["pid"] for row in rows if "pid" in row)
    os.kill(victim, signal.SIGKILL)  # a Ray worker, killed from outside, mid-run
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    after = {
        (row["case_id"], row.get("replicate", 0)): row for row in map(json.loads, journal.read_text().splitlines())
    }
    for key, row in before.items():
        assert after[key] == row, "a finished case was lost or changed"
    table = pd.read_parquet(results / "rk" / "results.parquet")
    assert "not_run" not in set(table["status"])
    faults = table[table["variant"].str.startswith("fault_")].set_index("variant")["status"]
    assert faults["fault_raise"] == "error" and faults["fault_exit"] == "error"
    assert (table[~table["variant"].str.startswith("fault_")]["status"].isin(["ok", "error"])).all()
