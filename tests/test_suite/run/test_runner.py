"""The sweep runner: faults become rows, nothing measured is lost, bad configs stop before any work."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from helpers import TESTS, suite, suite_in_process, write_grid

pytestmark = pytest.mark.slow  # subprocess sweeps (the fast lane: pytest -m "not slow")

REQUIRED_COLUMNS = [
    "variant",
    "impl",
    "device",
    "dtype",
    "mode",
    "batch",
    "seq_len",
    "num_heads",
    "num_kv_heads",
    "head_dim",
    "causal",
    "params",
    "status",
    "reason",
    "time_s",
    "time_iqr_s",
    "samples",
    "flops",
    "flops_counted",
    "peak_bytes",
    "setup_s",
]


def test_faults_become_rows_and_the_sweep_goes_on(tmp_path):
    blocks = "".join(
        f'\n[[block]]\nvariant = ["{v}"]\nimpl = ["native"]\n[[block]]\nvariant = ["full"]\nimpl = '
        f'["sdpa"]\nseq_len = [{n}]\n'
        for v, n in [
            ("fault_raise", 17),
            ("fault_exit", 18),
            ("fault_hang", 19),
            ("fault_oom", 20),
            ("fault_wrong", 21),
        ]
    )
    grid = write_grid(tmp_path, blocks, timeout=8)  # the hang costs the whole budget
    res = suite(
        "run",
        "--grid",
        str(grid),
        "--plugin",
        "fault_variants",
        "--run-id",
        "faults",
        "--results-dir",
        str(tmp_path / "results"),
        cwd=tmp_path,
    )
    assert res.returncode == 0, res.stderr
    table = pd.read_parquet(tmp_path / "results" / "faults" / "results.parquet")
    status = {(r.variant, r.seq_len): (r.status, r.reason) for r in table.itertuples()}
    assert status[("fault_raise", 16)][0] == "error" and "injected failure" in status[("fault_raise", 16)][1]
    assert status[("fault_exit", 16)] == ("error", "worker exited with code 3 while running the case")
    assert status[("fault_hang", 16)][0] == "timeout"
    assert status[("fault_oom", 16)][0] == "oom", status[("fault_oom", 16)]
    assert status[("fault_wrong", 16)][0] == "invalid" and "dense reference" in status[("fault_wrong", 16)][1]
    # each fault is followed by a good case, measured normally by a fresh worker
    for n in (17, 18, 19, 20, 21):
        assert status[("full", n)][0] == "ok", status[("full", n)]
    assert table.loc[table.status == "invalid", "time_s"].isna().all(), "an invalid case is not timed"
    unprobed = "not asked for: the grid's settings have probe = false"  # write_grid's: no probes
    assert json.loads((tmp_path / "results" / "faults" / "probe.json").read_text()) == {
        "cpu": {"float32": {"error": unprobed}}
    }
    assert json.loads((tmp_path / "results" / "faults" / "bandwidth.json").read_text()) == {"cpu": {"error": unprobed}}
    assert f"matmul peak and memory bandwidth: {unprobed}" in res.stdout + res.stderr


SMALL = (
    '\n[[block]]\nvariant = ["full", "sliding_window", "linear", "mqa"]\nimpl = ["dense", "sdpa", '
    '"native"]\nseq_len = [16, 24, 32, 40]\n'
)


def case_set(run_dir: Path) -> dict:
    table = pd.read_parquet(run_dir / "results.parquet")
    return dict(zip(table.case_id, table.status))


@pytest.fixture(scope="module")
def whole(tmp_path_factory) -> tuple[Path, Path]:
    """SMALL's grid and one whole run of it (folder "whole"), made once: each test copies the run it changes."""
    tmp = tmp_path_factory.mktemp("small")
    grid = write_grid(tmp, SMALL, name="small")
    reference = suite("run", "--grid", str(grid), "--run-id", "whole", "--results-dir", str(tmp / "results"), cwd=tmp)
    assert reference.returncode == 0, reference.stderr
    return grid, tmp / "results" / "whole"


def test_killed_runner_resumes_to_the_same_case_set(tmp_path, whole):
    grid, reference = whole
    results = tmp_path / "results"
    expected = case_set(reference)
    env = {**os.environ, "PYTHONPATH": f"{TESTS}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "suite", "run", "--grid", str(grid), "--run-id", "cut", "--results-dir", str(results)],
        cwd=tmp_path,
        env=env,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    journal = results / "cut" / "journal.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and (not journal.exists() or journal.read_text().count("\n") < 5):
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # the runner and its worker, mid-sweep
    proc.wait()
    done_before = journal.read_text().count("\n")
    assert 5 <= done_before < len(expected), "the kill must land mid-sweep"
    resumed = suite("run", "--resume", "cut", "--results-dir", str(results), cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    assert f"{done_before} of {len(expected)} cases already in the journal" in resumed.stderr
    assert case_set(results / "cut") == expected
    rows = [json.loads(line) for line in journal.read_text().splitlines()]
    assert sorted(r["case_id"] for r in rows) == sorted(expected), "each case exactly once"


def test_truncated_and_corrupt_journal_lines_are_reported_and_rerun(tmp_path, whole):
    results = tmp_path / "results"
    shutil.copytree(whole[1], results / "j")  # NB: a run's folder names it: the copy is run "j"
    journal = results / "j" / "journal.jsonl"
    lines = journal.read_text().splitlines(keepends=True)
    lines[3] = '{"case_id": "broken", "stat\n'  # corrupt line in the middle
    lines[-1] = lines[-1][: len(lines[-1]) // 2]  # interrupted while writing the last line
    journal.write_text("".join(lines))
    res = suite("run", "--resume", "j", "--results-dir", str(results), cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "line 4 is corrupt" in res.stderr
    assert f"line {len(lines)} is truncated" in res.stderr
    table = pd.read_parquet(results / "j" / "results.parquet")
    assert set(table.status) <= {"ok", "skipped"} and len(table) == len(case_set(results / "j"))


BAD_CONFIGS = [
    ('[[block]]\nvariant = ["nope"]\n', "field 'variant' = 'nope' (allowed: full, sliding_window"),
    (
        '[[block]]\nvariant = ["linear"]\nimpl = ["sdpa"]\n',
        "field 'impl' = 'sdpa' (allowed: implementations of the chosen variants: dense, fla-core, native, triton)",
    ),
    ('[[block]]\nvariant = ["full"]\nseq_len = [0]\n', "field 'seq_len' = 0 (allowed: integers from 1 to 2147483647)"),
    (
        '[[block]]\nvariant = ["gqa"]\nnum_heads = [8]\nnum_kv_heads = [3]\n',
        "field 'num_kv_heads' = 3 (allowed: a divisor of num_heads=8)",
    ),
    ('[[block]]\nvariant = ["sliding_window"]\nparams = { window = [-1] }\n', "window=-1 out of range (allowed: >= 0)"),
    ('[[block]]\nvariant = ["sliding_window"]\nparams = { widnow = [3] }\n', "field 'params.widnow'"),
    ('[[block]]\nvariant = ["full"]\nheads = [8]\n', "field 'heads'"),
    ('colour = "blue"\n', "field 'colour'"),
    ('[[block]]\nvariant = ["full"]\ndtype = ["float8"]\n', "field 'dtype' = 'float8'"),
    ('[[block]]\nvariant = ["full"]\nmode = ["train"]\n', "field 'mode' = 'train'"),
    (
        '[[block]]\nvariant = ["reformer"]\nmode = ["decode"]\n',
        "field 'mode' = 'decode' (allowed: fwd, fwd_bwd for reformer",
    ),
    (
        "[[block]]\nparams = { widnow = [3] }\n",
        "field 'params.widnow' = [3] (allowed: parameters of the chosen variants",
    ),
    ('[[block]]\nvariant = ["full"]\ncausal = [0]\n', "field 'causal' = 0 (allowed: true, false)"),
    ('[[block]]\nvariant = ["full"]\nnum_kv_heads = [2]\n', "field 'num_kv_heads' = [2] (allowed: only with"),
    ('[[block]]\nvariant = ["full"]\nkv_len = [0]\n', "field 'kv_len' = 0 (allowed: integers from 1 to 2147483647)"),
    (
        '[[block]]\nvariant = ["full"]\nmode = ["decode"]\nkv_len = [32]\n',
        "field 'mode' = 'decode' (allowed: fwd, fwd_bwd with kv_len",
    ),
]


@pytest.mark.parametrize(
    "body,message", BAD_CONFIGS, ids=[m.split("'")[1] if "'" in m else m[:12] for _, m in BAD_CONFIGS]
)
def test_bad_config_exits_2_naming_the_field_and_writes_nothing(tmp_path, body, message):
    grid = write_grid(tmp_path, body)
    res = suite_in_process("run", "--grid", str(grid), "--results-dir", str(tmp_path / "results"), cwd=tmp_path)
    assert res.returncode == 2, res.stderr
    assert message in res.stderr, res.stderr
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize(
    "name,text,message",
    [
        ("bad.toml", "[[block]\nvariant = 1", "malformed TOML"),
        ("bad.yaml", "block: [variant: {", "malformed YAML"),
        ("bad2.toml", "[settings]\nthreads = 'two'\n", "field 'threads' = 'two'"),
        ("bad3.toml", "[settings]\nwarp = 2\n", "field 'warp'"),
        ("bad4.toml", "[settings]\nprobe = 'no'\n", "field 'probe' = 'no' (allowed: true, false)"),
    ],
)
def test_malformed_files_and_settings_exit_2(tmp_path, name, text, message):
    (tmp_path / name).write_text(text)
    res = suite_in_process(
        "run", "--grid", str(tmp_path / name), "--results-dir", str(tmp_path / "results"), cwd=tmp_path
    )
    assert res.returncode == 2 and message in res.stderr, res.stderr
    assert not (tmp_path / "results").exists()


def test_yaml_grid_with_the_same_schema(tmp_path):
    (tmp_path / "g.yaml").write_text(
        "name: y\nblock:\n  - variant: [linear]\n    seq_len: [64, 128]\n    head_dim: [8, 16]\n"
    )
    res = suite("run", "--grid", str(tmp_path / "g.yaml"), "--dry-run", cwd=tmp_path)
    assert res.returncode == 0 and "16 cases planned" in res.stdout  # 4 impls × 2 n × 2 d, res.stdout + res.stderr


def test_dry_run_lists_cases_and_writes_nothing(tmp_path):
    res = suite("run", "--grid", "smoke", "--dry-run", "--results-dir", str(tmp_path / "r"), cwd=tmp_path)
    assert res.returncode == 0
    assert res.stdout.strip().splitlines()[-1].endswith("nothing run, nothing written")
    assert not (tmp_path / "r").exists()


def test_every_planned_case_has_a_status_and_the_table_its_columns(tmp_path):
    grid = write_grid(
        tmp_path,
        '\n[[block]]\nvariant = ["sliding_window"]\nimpl = ["*"]\nseq_len = [16, 32]\n',
        name="cols",
        probe=True,
    )
    results = tmp_path / "results"
    res = suite(
        "run",
        "--grid",
        str(grid),
        "--run-id",
        "c",
        "--results-dir",
        str(results),
        "--reports-dir",
        str(tmp_path / "reports"),
        cwd=tmp_path,
        report=True,
    )
    assert res.returncode == 0, res.stderr
    table = pd.read_parquet(results / "c" / "results.parquet")
    plan = json.loads((results / "c" / "plan.json").read_text())
    assert len(table) == len(plan["cases"]) == 14  # 7 impls (local-attention and triton among them) × 2 n
    assert all(col in table.columns for col in REQUIRED_COLUMNS)
    assert set(pd.read_csv(results / "c" / "results.csv").columns) == set(table.columns)
    ok = table[table.status == "ok"]
    assert len(ok) >= 10 and (ok.time_s > 0).all() and (ok.peak_bytes > 0).all()
    assert all(len(s) >= 3 for s in ok.samples), "raw samples are kept"
    assert (ok.flops > 0).all()
    spent = ok.set_index("impl")["op_seconds"].map(json.loads)  # where a warm call's time went
    assert all(0 < sum(s.values()) < 1 for s in spent)
    assert all("_scaled_dot_product_flash_attention_for_cpu" in s for s in spent["sdpa"])
    skipped = table[table.status == "skipped"]
    assert set(skipped.impl) == {"xformers"} and skipped.reason.str.contains("xformers").all()
    env = json.loads((results / "c" / "env.json").read_text())
    assert {"torch", "xformers", "cpu_model", "threads", "git_commit", "fingerprint_id"} <= set(env)
    assert "done in" in res.stdout and "ok" in res.stdout
    peak = json.loads((results / "c" / "probe.json").read_text())["cpu"]["float32"]
    assert peak["flops_per_s"] > 1e8 and peak["threads"] == 1  # the run's GEMM probe
    assert {s["what"] for s in peak["by_shape"].values()} == {"square", "scores q·kᵀ", "values p·v"}
    assert peak["flops_per_s"] == max(s["flops_per_s"] for s in peak["by_shape"].values()) and peak["spread"] >= 0
    memory = json.loads((results / "c" / "bandwidth.json").read_text())["cpu"]  # the run's bandwidth probe
    assert memory["bytes_per_s"] > 1e8 and memory["cache_bytes_per_s"] > 1e8 and memory["threads"] == 1
    from suite.machine import stream

    swept = memory["sweep"]  # triad past L2, for the last level's measured reach (None where no level ends)
    assert len(swept["buffer_bytes"]) == len(swept["bytes_per_s"]) >= 3 and min(swept["bytes_per_s"]) > 1e8
    assert swept["reach_bytes"] == stream.reach(swept["buffer_bytes"], swept["bytes_per_s"])  # None where no level ends
    assert [len(r) for r in swept["rounds"]] == [stream.ROUNDS] * len(swept["bytes_per_s"])  # each size every round
    assert 'id="sweep-cpu"' in (tmp_path / "reports" / "c" / "index.html").read_text()
    assert {(k["kernel"], k["level"]) for k in memory["by_kernel"].values()} == {
        (kernel, level) for kernel in ("copy", "triad") for level in ("memory", "cache")
    }
    assert set(env["cpu_caches"]) >= {"L1d", "L2"}  # the host's caches, the probe's sizes
    assert (tmp_path / "reports" / "c" / "index.html").is_file() and "report:" in res.stdout


def test_workers_compile_in_their_own_process_with_the_threads_asked(tmp_path):
    """A worker compiles in its own process (the address-space limit, and no compile processes beside
    CPU timing): inductor reads its compile threads once, at its import, which must come after the
    worker's setup (a fork server that preloaded it gave 2 here); and torch runs on the grid's threads."""
    grid = write_grid(tmp_path, '\n[[block]]\nvariant = ["inside"]\nimpl = ["native"]\n', name="inside")
    res = suite(
        "run",
        "--grid",
        str(grid),
        "--plugin",
        "fault_variants",
        "--run-id",
        "i",
        "--results-dir",
        str(tmp_path / "results"),
        cwd=tmp_path,
    )
    assert res.returncode == 0, res.stderr
    row = json.loads((tmp_path / "results" / "i" / "journal.jsonl").read_text().splitlines()[0])
    assert row["status"] == "ok", row["reason"]
    assert row["notes"] == {"compile_threads": "1", "threads": "1", "path": "sdpa"}


def test_replicates_are_timed_in_separate_processes(tmp_path):
    body = SMALL.replace("seq_len = [16, 24, 32, 40]", "seq_len = [16, 32]")
    grid = write_grid(tmp_path, body.replace("[defaults]", "[defaults]"), name="rep")
    text = grid.read_text().replace("check_seq_len = 16", "check_seq_len = 16\nreplicates = 3")
    grid.write_text(text)
    results = tmp_path / "results"
    res = suite("run", "--grid", str(grid), "--run-id", "r", "--results-dir", str(results), cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    rows = [json.loads(line) for line in (results / "r" / "journal.jsonl").read_text().splitlines()]
    table = pd.read_parquet(results / "r" / "results.parquet")
    ok = table[table.status == "ok"]
    assert len(ok) >= 10 and (ok.replicates == 3).all()
    for case_id in ok.case_id:
        mine = [r for r in rows if r["case_id"] == case_id]
        assert sorted(r["replicate"] for r in mine) == [0, 1, 2]
        assert len({r["pid"] for r in mine}) == 3, "each replicate in its own worker process"
        medians = ok.loc[ok.case_id == case_id, "replicate_times_s"].iloc[0]
        assert len(medians) == 3
        assert ok.loc[ok.case_id == case_id, "time_s"].iloc[0] == sorted(medians)[1]
