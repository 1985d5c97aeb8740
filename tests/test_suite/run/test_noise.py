"""Noise awareness: the machine's load is read while each case is timed, and a busy run says so."""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pandas as pd
import pytest
from helpers import suite

from suite.analyse.exponents import prepare
from suite.analyse.noise import noise
from suite.run.measurement import host_load as load
from suite.store.rundir import RunDir

pytestmark = pytest.mark.slow  # subprocess sweeps beside a CPU hog (the fast lane: pytest -m "not slow")

HOG = "import time\nend = time.time() + {s}\nwhile time.time() < end: pass\n"


def _hog(seconds: float) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOG.format(s=seconds)])
    time.sleep(0.3)  # NB: let it start spinning before the window opens
    return proc


def test_another_process_spinning_is_seen_as_a_busy_core():
    hog = _hog(3)
    try:
        before = load.snapshot()
        time.sleep(1.0)  # this process idles: what is busy is someone else
        seen = load.since(before)
    finally:
        hog.kill()
        hog.wait()
    assert seen["busy_cores"] > 0.7, seen
    assert set(seen) == {"busy_cores", "steal_cores", "load_avg"}


def _frame(busy: list[float], cv: float = 0.01) -> pd.DataFrame:
    rows = []
    for i, b in enumerate(busy):
        reps = list(1e-3 * (1 + cv * np.array([-1.0, 0.0, 1.0])))
        rows.append(
            {
                "variant": "full",
                "impl": "sdpa" if i % 2 else "native",
                "params": "{}",
                "causal": False,
                "mode": "fwd",
                "status": "ok",
                "busy_cores": b,
                "steal_cores": 0.0,
                "retimed": int(b > 0.5),
                "replicate_times_s": reps,
            }
        )
    return prepare(pd.DataFrame(rows))


def test_a_run_with_many_busy_cases_is_too_noisy_and_names_the_verdicts_it_touches():
    quiet = noise(_frame([0.01] * 20))
    assert quiet.recorded and not quiet.too_noisy and quiet.busy == 0 and "quiet enough" in quiet.line()
    busy = noise(_frame([0.01] * 16 + [0.9, 0.95, 1.0, 0.8]))
    assert busy.too_noisy and busy.busy == 4 and busy.retimed == 4
    assert busy.touched == ["full/native", "full/sdpa"] and "TOO NOISY TO TRUST" in busy.line()
    wide = noise(_frame([0.01] * 20, cv=0.2))  # quiet by load, but the processes disagree
    assert wide.too_noisy and wide.median_cv > 0.05


def test_an_old_run_without_load_figures_says_so():
    frame = _frame([0.0] * 3).assign(busy_cores=None)
    assert not noise(frame).recorded and "not recorded" in noise(frame).line()


GRID = """
name = "hog"
[settings]
threads = 1
min_run_time_s = 0.2
max_samples = 20
check_seq_len = 16
replicates = 1
probe = false
busy_limit_cores = 0.3
retimes = 1
[defaults]
batch = [1]
num_heads = [2]
head_dim = [16]
[[block]]
variant = ["full"]
impl = ["sdpa"]
seq_len = [64, 128, 256]
"""


def test_a_run_beside_a_cpu_hog_records_it_retimes_and_says_it_was_too_noisy(tmp_path):
    (tmp_path / "hog.toml").write_text(GRID)
    hog = _hog(120)
    try:
        res = suite(
            "run",
            "--grid",
            str(tmp_path / "hog.toml"),
            "--run-id",
            "h",
            "--results-dir",
            str(tmp_path / "results"),
            "--reports-dir",
            str(tmp_path / "reports"),
            cwd=tmp_path,
            report=True,
        )
    finally:
        hog.kill()
        hog.wait()
    assert res.returncode == 0, res.stderr
    frame = RunDir(tmp_path / "results" / "h").read_table()
    assert (frame["busy_cores"] > 0.3).all() and (frame["retimed"] == 1).all()
    assert "TOO NOISY TO TRUST" in res.stdout
    page = (tmp_path / "reports" / "h" / "index.html").read_text()
    assert "TOO NOISY TO TRUST" in page and "timed on a busy machine" in page


STABLE = """
name = "stable"
[settings]
threads = 1
min_run_time_s = 0.05
max_samples = 20
check_seq_len = 16
replicates = 1
probe = false
[defaults]
batch = [1]
num_heads = [2]
head_dim = [16]
[[block]]
variant = ["sliding_window"]
impl = ["native"]
seq_len = [2048, 4096, 8192, 16384, 32768]
[[block]]
variant = ["full"]
impl = ["sdpa"]
seq_len = [512, 1024, 2048, 4096]
"""


def _verdicts(stdout: str) -> dict[str, str]:
    rows = [line.split() for line in stdout.splitlines() if line.startswith(("sliding_window ", "full "))]
    return {f"{r[0]}/{r[1]}": r[-1] for r in rows}


def test_the_same_grid_twice_gives_the_same_verdicts_or_says_the_second_run_was_too_noisy(tmp_path):
    """One run on the machine as it is, one beside a process keeping a core busy."""
    (tmp_path / "stable.toml").write_text(STABLE)
    common = (
        "--grid",
        str(tmp_path / "stable.toml"),
        "--results-dir",
        str(tmp_path / "results"),
        "--reports-dir",
        str(tmp_path / "reports"),
    )
    first = suite("run", *common, "--run-id", "one", cwd=tmp_path, report=True)
    hog = _hog(300)
    try:
        second = suite("run", *common, "--run-id", "two", cwd=tmp_path, report=True)
    finally:
        hog.kill()
        hog.wait()
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    one, two = _verdicts(first.stdout), _verdicts(second.stdout)
    assert set(one) == {"sliding_window/native", "full/sdpa"} and set(two) == set(one)
    # the same verdicts, or a plain warning; beside the hog the warning must come (the load is seen)
    assert "TOO NOISY TO TRUST" in second.stdout, second.stdout
    assert one == two or "TOO NOISY TO TRUST" in first.stdout + second.stdout, (one, two)
