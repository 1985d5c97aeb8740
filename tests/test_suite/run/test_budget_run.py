"""A real run held to a wall-time budget: a series the budget cannot buy stops with stop "budget"."""

from __future__ import annotations

import json

import pytest
from helpers import suite

pytestmark = pytest.mark.slow  # subprocess sweeps (the fast lane: pytest -m "not slow")

GRID = """
name = "budget"
[settings]
min_run_time_s = 0.02
max_samples = 10
max_call_s = 0.5
check_seq_len = 16
memory_budget_gib = 3
probe = false
budget_min = 30
[[block]]
variant = ["linear"]
impl = ["native"]
num_heads = [1]
head_dim = [8]
seq_len = {min = 64, max = 1048576}
"""


def test_a_budget_spent_by_the_first_round_stops_the_ladder_saying_so(tmp_path):
    """--budget overrides the grid's: a second is spent before the first round ends (the workers' start), so the
    ladder's first climb is not bought; the run prints its predicted wall time before any case."""
    (grid := tmp_path / "b.toml").write_text(GRID)
    res = suite("run", "--grid", str(grid), "--run-id", "b", "--no-report", "--budget", "1s", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stderr.index("predicted wall time: ~") < res.stderr.index("linear/native")
    run = tmp_path / "results" / "b"
    (only,) = json.loads((run / "ladders.json").read_text())["ladders"]
    assert only["stop"] == "budget" and "not reached within the budget" in only["why"]
    assert json.loads((run / "plan.json").read_text())["settings"]["budget_min"] == pytest.approx(1 / 60)
    assert "every series has stopped: 1 budget" in res.stderr


def test_a_bad_budget_exits_2_naming_the_option_and_what_is_allowed(tmp_path):
    res = suite("run", "--grid", "smoke", "--budget", "5x", "--no-report", cwd=tmp_path)
    assert res.returncode == 2 and "--budget '5x' (allowed: a time such as 90s, 20m or 1.5h" in res.stderr
