"""Interleaved A/B (`suite ab`): the paired test on its own, then real sweeps of two checkouts."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import ROOT, suite_in_process

from suite.analyse import paired
from suite.errors import UsageError
from suite.run.ab import checkouts as sides


def _blocks(
    times: dict[str, tuple[float, float]],
    pairs: int = 8,
    seed: int = 0,
    status: dict | None = None,
    process_sd: float = 0.03,
) -> list[dict]:
    """Journal lines of a sweep: case -> (A's time, B's time), with per-process offsets and 1% per block."""
    rng = np.random.default_rng(seed)
    lines = []
    for name, (ta, tb) in times.items():
        for pair in range(pairs):
            offset = {"a": rng.normal(0, process_sd), "b": rng.normal(0, process_sd)}
            for position, side in enumerate("abba"):
                t = (ta if side == "a" else tb) * np.exp(offset[side] + rng.normal(0, 0.01))
                st = (status or {}).get((name, side), "ok")
                lines.append(
                    {
                        "case_id": name,
                        "variant": name,
                        "impl": "native",
                        "device": "cpu",
                        "dtype": "float32",
                        "mode": "fwd",
                        "batch": 1,
                        "seq_len": 64,
                        "num_heads": 2,
                        "num_kv_heads": 2,
                        "head_dim": 16,
                        "causal": False,
                        "params": {},
                        "side": side,
                        "pair": pair,
                        "position": position,
                        "status": st,
                        "reason": "" if st == "ok" else f"{st} here",
                        "time_s": t if st == "ok" else None,
                    }
                )
    return lines


def _verdict(times, **kw):
    return paired.verdict(paired.blocks(_blocks(times, **kw)))


def test_the_same_code_on_both_sides_is_no_regression():
    verdict = _verdict({f"c{i}": (1e-3, 1e-3) for i in range(40)})
    assert verdict.code == 0 and set(verdict.cases["status"]) == {"unchanged"}


@pytest.mark.slow  # the gate over many simulated grids: the full suite runs it, the fast lane not
@pytest.mark.parametrize("share,slowdown", [(0.01, 0.30), (0.05, 0.08), (0.12, 0.08), (0.60, 0.08), (1.0, 0.08)])
def test_every_slowed_case_is_called_whatever_share_of_the_grid_it_is(share, slowdown):
    """No grid shift is removed: 60% or all of the cases 8% slower are 60% or all of them flagged.
    (1% process noise, as wait-paced cases have; the power on real kernels is benchmarks/ab_power.py's.)"""
    names = [f"c{i}" for i in range(100)]
    slow = set(names[: max(1, round(share * len(names)))])
    verdict = _verdict({n: (1e-3, 1e-3 * (1 + slowdown if n in slow else 1)) for n in names}, pairs=8, process_sd=0.01)
    flagged = set(verdict.cases.loc[verdict.cases["status"] == "slower", "case_id"])
    assert verdict.code == 1 and flagged == slow


def test_a_common_move_blocks_when_the_pairs_agree_on_it_even_with_no_case_called():
    """40 cases 6% slower, each too noisy (15% per process) to be called alone: the pairs' medians agree."""
    verdict = _verdict({f"c{i}": (1e-3, 1.06e-3) for i in range(40)}, process_sd=0.15)
    assert "slower" not in set(verdict.cases["status"])
    assert verdict.code == 1 and verdict.reasons[0].startswith("the whole grid is slower")
    assert verdict.cases.attrs["grid_shift_p"] < 0.01


def test_two_cases_are_no_grid_and_a_noisy_one_does_not_block_for_it():
    """The CI failure of stop 20: two paced cases, one whose two pairs disagreed by 2x, median +8.7%."""
    verdict = _verdict({"c0": (1e-3, 1e-3), "c1": (1e-3, 1.19e-3)}, pairs=2, process_sd=0.3)
    assert verdict.code == 0 and verdict.cases.attrs["grid_shift"] == 0.0


def test_the_interval_and_ratio_come_from_the_pairs():
    table = paired.cases(paired.blocks(_blocks({"x": (1e-3, 1.2e-3)}, pairs=6)))
    row = table.iloc[0]
    assert row["pairs"] == 6 and row["ratio_lo"] < row["ratio"] < row["ratio_hi"]
    assert 1.1 < row["ratio"] < 1.3 and row["ratio_lo"] > 1.05


def test_one_pair_cannot_be_tested():
    table = paired.cases(paired.blocks(_blocks({"x": (1e-3, 1e-3)}, pairs=1)))
    assert table.iloc[0]["status"] == "untested"


def test_sides_that_differ_in_status_say_how():
    status = {
        ("gone", "b"): "absent",
        ("added", "a"): "absent",
        ("broke", "b"): "error",
        ("healed", "a"): "oom",
        ("xf", "a"): "skipped",
        ("xf", "b"): "skipped",
    }
    names = ["gone", "added", "broke", "healed", "xf", "fine"]
    table = paired.cases(paired.blocks(_blocks({n: (1e-3, 1e-3) for n in names}, status=status)))
    got = dict(zip(table["case_id"], table["status"]))
    assert got == {
        "gone": "missing",
        "added": "new",
        "broke": "failed",
        "healed": "fixed",
        "xf": "skipped",
        "fine": "unchanged",
    }


def test_a_ref_that_is_not_a_commit_or_could_be_an_option_is_refused(tmp_path):
    for bad in ("--upload-pack=evil", "HEAD..main", "no-such-ref-anywhere", "a b", str(tmp_path)):
        with pytest.raises(UsageError, match="field 'base'"):
            sides.resolve("base", bad, ROOT)


def _repo(folder: Path) -> tuple[Path, str]:
    """A throwaway repository of one empty commit on branch `feature`: (its folder, the commit)."""
    folder.mkdir()
    for args in (
        ("init", "-q", "-b", "feature"),
        ("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "--allow-empty", "-m", "x"),
    ):
        subprocess.run(["git", *args], cwd=folder, check=True, capture_output=True)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=folder, capture_output=True, text=True)
    return folder, head.stdout.strip()


def test_a_folder_is_a_side_only_where_an_option_names_it(tmp_path, monkeypatch):
    """A folder here named like a branch, or like nothing git knows, is never a side by its name: git
    resolves the name or it is refused; --base-dir / --new-dir make a folder a side, and the positionals
    fill the other sides in order."""
    repo, head = _repo(tmp_path / "repo")
    for name in ("feature", "plugins"):
        (tmp_path / name / "suite").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert sides.resolve("base", "feature", repo) == head
    with pytest.raises(UsageError, match="field 'new' = 'plugins'.*a folder only with --new-dir PATH"):
        sides.chosen("feature", "plugins", None, None, repo)
    plugins = (tmp_path / "plugins").resolve()
    assert sides.chosen("feature", "feature", None, None, repo) == ("feature", "feature")
    assert sides.chosen("feature", None, None, "plugins", repo) == ("feature", plugins)
    assert sides.chosen("HEAD", None, "plugins", None, repo) == (plugins, "HEAD")
    assert sides.chosen(None, None, "plugins", "plugins", repo) == (plugins, plugins)
    for given, message in (
        ((None, None, "plugins", None), "two sides in all"),
        (("HEAD", "HEAD", "plugins", None), "two sides in all"),
        (("HEAD", None, None, "nowhere"), "--new-dir 'nowhere': no such folder"),
    ):
        with pytest.raises(UsageError, match=message):
            sides.chosen(*given, repo)
    with sides.checked_out(head, plugins, repo) as (a, b):
        assert a.commit == head and a.root != repo and (b.root, b.given) == (plugins, str(plugins))


KEEP = """import sys, time
from pathlib import Path
from suite.run.ab import checkouts
with checkouts.checked_out(sys.argv[1], sys.argv[1], Path(sys.argv[2])) as (a, b):
    print(a.root, b.root, flush=True)
    time.sleep(120)
"""


def _worktrees(repo: Path) -> list[Path]:
    listed = subprocess.run(["git", "worktree", "list", "--porcelain"], cwd=repo, capture_output=True, text=True)
    return [
        Path(line[len("worktree ") :]).resolve() for line in listed.stdout.splitlines() if line.startswith("worktree ")
    ]


def test_worktrees_of_a_killed_ab_are_removed_by_the_next_command_that_makes_one(tmp_path):
    """SIGKILL runs no cleanup: the killed process's two worktrees stay registered, one folder left in the
    temporary folder and one gone (a cleaner took it). The next checkout removes both registrations and the
    folder, and keeps the worktrees of a process that still lives."""
    repo, head = _repo(tmp_path / "repo")
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.Popen([sys.executable, "-c", KEEP, head, str(repo)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        killed = [Path(p).resolve() for p in proc.stdout.readline().split()]
    finally:
        proc.kill()
        proc.wait()
    assert len(killed) == 2 and set(killed) <= set(_worktrees(repo)), killed
    shutil.rmtree(killed[1])
    with sides.worktree(head, repo) as mine:
        assert _worktrees(repo) == [repo.resolve(), mine.resolve()] and not killed[0].parent.exists()
        sides.prune(repo)
        assert mine.resolve() in _worktrees(repo) and mine.is_dir()  # its owner lives: this process
    assert _worktrees(repo) == [repo.resolve()]


def test_bad_input_is_refused_before_any_work(tmp_path):
    (tmp_path / "tests").mkdir()
    for args, field in (
        (("no-such-ref-xyz", "HEAD"), "field 'base'"),
        (("HEAD", "HEAD..x"), "field 'new'"),
        (("tests", "HEAD"), "field 'base' = 'tests'"),
        (("HEAD",), "two sides in all"),
        (("HEAD", "HEAD", "--new-dir", "tests"), "two sides in all"),
        (("--base-dir", "nowhere", "HEAD"), "--base-dir 'nowhere'"),
        (("HEAD", "HEAD", "--pairs", "1"), "--pairs 1"),
        (("HEAD", "HEAD", "--rounds", "0"), "--rounds 0"),
        (("HEAD", "HEAD", "--run-id", "../out"), "--run-id"),
    ):
        res = suite_in_process(
            "ab", *args, "--repo", str(ROOT), "--grid", "smoke", "--results-dir", str(tmp_path / "r"), cwd=tmp_path
        )
        assert res.returncode == 2 and field in res.stderr, res.stderr
    assert not (tmp_path / "r").exists() or not any((tmp_path / "r").iterdir())
