"""`suite ab` end to end: two sides' servers, A, B, B, A, and two commits in worktrees."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from helpers import ROOT, paced_grid, suite

pytestmark = pytest.mark.slow  # subprocess sweeps (the fast lane: pytest -m "not slow")


def _side(tmp: Path, name: str, factor: float = 1.0, slow=()) -> Path:
    folder = tmp / name
    folder.mkdir()
    if slow:  # this side's code is slower at these lengths: `paced/native` reads the module
        (folder / "pace_factor.py").write_text(f"FACTOR = {factor}\nSLOW_N = {set(slow)!r}\n")
    return folder


def test_a_real_sweep_flags_exactly_the_slowed_cases_of_side_b(tmp_path):
    """12 wait-paced cases, 3 of them 50% slower in B's code: A, B, B, A in 5 process pairs.
    NB: this tests the mechanism end to end; the power at small effects is the synthetic tests' (above).
    A loaded CI machine's jitter made it miss one case at 8% (stop 24) and again at 20% (stop 37)."""
    lengths = list(range(16, 28))
    (tmp_path / "g.toml").write_text(paced_grid(lengths))
    a, b = _side(tmp_path, "a"), _side(tmp_path, "b", 1.50, slow=lengths[:3])
    res = suite(
        "ab",
        "--base-dir",
        str(a),
        "--new-dir",
        str(b),
        "--grid",
        str(tmp_path / "g.toml"),
        "--plugin",
        "fault_variants",
        "--pairs",
        "5",
        "--rounds",
        "1",
        "--results-dir",
        str(tmp_path / "results"),
        "--run-id",
        "r",
        cwd=tmp_path,
    )
    assert res.returncode == 1, res.stdout + res.stderr
    payload = json.loads((tmp_path / "results" / "r" / "compare.json").read_text())
    slower = sorted(c["seq_len"] for c in payload["cases"] if c["status"] == "slower")
    assert slower == lengths[:3] and payload["counts"] == {"unchanged": 9, "slower": 3}
    lines = (tmp_path / "results" / "r" / "ab.jsonl").read_text().splitlines()
    assert len(lines) == 12 * 5 * 4  # every block journaled
    order = [json.loads(line)["side"] for line in lines[:4]]
    assert order == ["a", "b", "b", "a"]
    assert (tmp_path / "results" / "r" / "ab.parquet").is_file()


def _worktree_folders(repo: Path) -> list[str]:
    """The folders of `repo`'s worktrees (not their commits: other worktrees may commit meanwhile)."""
    listed = subprocess.run(["git", "worktree", "list", "--porcelain"], cwd=repo, capture_output=True, text=True)
    return [line for line in listed.stdout.splitlines() if line.startswith("worktree ")]


def test_two_commits_are_checked_out_into_worktrees_and_removed_after(tmp_path):
    (tmp_path / "g.toml").write_text(paced_grid([16, 17], replicates=2))
    before = _worktree_folders(ROOT)
    res = suite(
        "ab",
        "HEAD",
        "HEAD",
        "--repo",
        str(ROOT),
        "--pairs",
        "2",
        "--rounds",
        "1",
        "--grid",
        str(tmp_path / "g.toml"),
        "--plugin",
        "fault_variants",
        "--results-dir",
        str(tmp_path / "results"),
        "--run-id",
        "c",
        cwd=tmp_path,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    plan = json.loads((tmp_path / "results" / "c" / "plan.json").read_text())
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    assert plan["ab"]["sides"]["a"]["commit"] == plan["ab"]["sides"]["b"]["commit"] == head
    assert _worktree_folders(ROOT) == before
