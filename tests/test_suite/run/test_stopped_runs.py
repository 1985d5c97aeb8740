"""A run stopped before its end (Ctrl-C, SIGTERM from `timeout` or a cancelled CI job, a killed
machine) loses nothing it measured: its table is written from the journal."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest
from helpers import TESTS, unprobed

from suite.store.rundir import RunDir

pytestmark = pytest.mark.slow  # subprocess sweeps (the fast lane: pytest -m "not slow")

LEGACY = TESTS / "fixtures" / "legacy" / "legacy-a"


def test_a_run_killed_before_its_table_gets_one_from_its_journal(tmp_path, capsys):
    shutil.copytree(LEGACY, tmp_path / "killed")
    (tmp_path / "killed" / "results.parquet").unlink()
    (tmp_path / "killed" / "results.csv").unlink()
    lines = (tmp_path / "killed" / "journal.jsonl").read_text().splitlines()
    kept = lines[: len(lines) // 2]  # killed halfway through
    (tmp_path / "killed" / "journal.jsonl").write_text("\n".join(kept) + "\n")

    run = RunDir.resolve("killed", tmp_path)

    frame = run.read_table()
    planned = json.loads((tmp_path / "killed" / "plan.json").read_text())["cases"]
    measured = {json.loads(line)["case_id"] for line in kept}
    assert len(frame) == len(planned)
    assert set(frame.loc[frame["status"] != "not_run", "case_id"]) == measured
    assert (frame["status"] == "not_run").sum() == len(planned) - len(measured) > 0
    assert "stopped before writing its table" in capsys.readouterr().err


def test_sigterm_stops_a_sweep_and_still_writes_the_table(tmp_path):
    grid = unprobed("smoke", tmp_path / "grid")  # NB: a folder of the results folder no listing takes for a run
    cmd = [
        sys.executable,
        "-m",
        "suite",
        "run",
        "--grid",
        str(grid),
        "--variant",
        "full,linear",
        "--run-id",
        "stopped",
        "--results-dir",
        str(tmp_path),
        "--no-report",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    journal = tmp_path / "stopped" / "journal.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and not (journal.is_file() and journal.read_text().count("\n") >= 2):
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    frame = pd.read_parquet(tmp_path / "stopped" / "results.parquet")
    statuses = set(frame["status"])
    assert "ok" in statuses and "not_run" in statuses, out
