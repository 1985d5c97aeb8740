"""`history check --confirm` (issue 48): the screen's candidates, and each slowdown measured again as an
interleaved A/B of its two commits before it fails the check (the A/B here a stand-in with planted ratios;
tests/test_suite/run/test_ab_sweeps.py runs real ones)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("duckdb", reason="the `history` extra: pip install -e \".[history]\"")
pytest.importorskip("asv", reason="the `history` extra: pip install -e \".[history]\"")

from history_runs import LENGTHS, commit_of, synthetic_run  # noqa: E402  (after the importorskips)
from suite import cli  # noqa: E402
from suite.analyse import paired  # noqa: E402
from suite.history import changes, store  # noqa: E402
from suite.run.ab import session  # noqa: E402

GRID = """name = "synthetic"
[settings]
threads = 1
[defaults]
device = ["cpu"]
dtype = ["float32"]
mode = ["fwd"]
batch = [1]
num_heads = [2]
head_dim = [16]
causal = [false]
seq_len = [{lengths}]
[[block]]
variant = ["full"]
impl = ["sdpa"]
[[block]]
variant = ["linear"]
impl = ["native"]
"""


def level_then(tail: list[float], sd: float = 0.015, count: int = 30, seed: int = 3) -> np.ndarray:
    """`count` nights of `sd` log noise at 10 ms, then the tail's ratios (times in seconds)."""
    rng = np.random.default_rng(seed)
    return 0.01 * np.exp(np.r_[rng.normal(0, sd, count), np.log(tail)])


# ------------------------------------------------------------------ the screen
@pytest.mark.parametrize("tail,screened", [([1.04, 1.05, 1.035], True), ([1.10, 0.98, 1.06], True),
                                           ([1.02, 1.025, 1.01], False), ([0.95, 0.96, 0.94], False)])
def test_the_screen_takes_the_newest_points_median_against_the_level(tail, screened):
    """3% and more above the level's median, by the tail's median (one fast night of three does not hide
    a step); inside the tail's band (5% here), so the tail's rule calls none of them; no speedup."""
    y = level_then(tail)
    logs = np.log(y)
    assert changes.tail_change(logs, "time", changes.THRESHOLD["time"]) is None
    found = changes.screen_change(logs, "time")
    assert (found is not None) == screened
    if screened:
        assert found.rule == "screen" and found.slower and (found.before, found.after) == (29, 30)
        assert math.isclose(found.size, float(np.median(y[30:]) / np.median(y[:30]) - 1), rel_tol=1e-6)  # a median of logs
    with_screen = changes.change_points(y, "time", tail=False, screen=changes.SCREEN)
    assert (changes.classify(len(y), with_screen) == "regression") == screened
    assert changes.classify(len(y), changes.change_points(y, "time", tail=False)) == "no change"


# ------------------------------------------------------------------ check --confirm
class PlantedAB:
    """Stands in for suite.run.ab.session.measure: side B's times are side A's × the variant's ratio,
    with 3% noise between processes and 1% between blocks; records what it was asked."""

    def __init__(self, ratios: dict[str, float]):
        self.ratios, self.asked = ratios, []

    def __call__(self, run, grid, before, after, repo, pairs, rounds, plugins, out=None):
        self.asked.append((before, after, sorted(c.case_id for c in grid.cases), pairs, rounds))
        rng = np.random.default_rng(len(self.asked))
        lines = []
        for case in grid.cases:
            for pair in range(pairs):
                offset = {side: rng.normal(0, 0.03) for side in "ab"}
                for position, side in enumerate("abba" * rounds):
                    ratio = self.ratios.get(case.variant, 1.0) if side == "b" else 1.0
                    lines.append({**case.key, "case_id": case.case_id, "side": side, "pair": pair,
                                  "position": position, "status": "ok", "reason": "",
                                  "time_s": 1e-3 * ratio * math.exp(offset[side] + rng.normal(0, 0.01))})
        return paired.blocks(lines)


def confirm_check(db: Path, tmp_path: Path, planted: PlantedAB, monkeypatch, *extra: str) -> int:
    grid = tmp_path / "g.toml"
    grid.write_text(GRID.format(lengths=", ".join(map(str, LENGTHS))))
    monkeypatch.setattr(session, "measure", planted)
    return cli.main(["history", "check", "--db", str(db), "--confirm", "--grid", str(grid),
                     "--results-dir", str(tmp_path / "results"), *extra])


def test_a_slowdown_the_ab_calls_again_fails_the_check_and_one_it_does_not_only_warns(history, tmp_path, capsys,
                                                                                       monkeypatch):
    """full/sdpa's +20% is re-measured and called (exit 1); linear's slower times (its steeper exponent)
    are re-measured and not called by this A/B, so they only warn; the exponent is not re-measured."""
    planted = PlantedAB({"full": 1.2})
    assert confirm_check(history, tmp_path, planted, monkeypatch, "--pairs", "6") == 1
    out = capsys.readouterr().out
    before, after = commit_of(13), commit_of(14)
    assert {(b, a) for b, a, *_ in planted.asked} == {(before, after)}
    assert len(planted.asked) == 2 and all(len(ids) == len(LENGTHS) and pairs == 6 and rounds == 2
                                           for _, _, ids, pairs, rounds in planted.asked)  # every length, ab's rounds
    regressions = [line for line in out.splitlines() if line.startswith("REGRESSION")]
    assert regressions and all("full/sdpa" in line or "exponent in n" in line for line in regressions), regressions
    assert any(line.startswith("A/B of full/sdpa") and ": confirmed; A/B " in line and "slower" in line
               for line in out.splitlines())
    warned = [line for line in out.splitlines() if line.startswith("not confirmed")]
    assert len(warned) == len(LENGTHS) + 1 and all("linear/native" in line for line in warned), warned


def test_nothing_the_ab_calls_again_passes_the_check(tmp_path, capsys, monkeypatch):
    db = tmp_path / "h.duckdb"
    for i in range(17):
        store.add(db, synthetic_run(i, **({"slower": {"full": 1.2}} if i >= 14 else {})))
    assert cli.main(["history", "check", "--db", str(db)]) == 1
    capsys.readouterr()
    assert confirm_check(db, tmp_path, PlantedAB({}), monkeypatch) == 0
    out = capsys.readouterr().out
    assert "REGRESSION" not in out and out.count("\nnot confirmed ") == len(LENGTHS) + 1


def test_the_screen_sends_a_step_inside_the_band_to_the_ab(tmp_path, capsys, monkeypatch):
    """full/sdpa 3.5% slower for the last three runs, in 2% noise: the rules call two of its five series
    (four lengths and their lengths together) past their 5%; with --confirm the screen sends the other three
    to the A/B as well, which calls the series: all five fail the check."""
    db = tmp_path / "h.duckdb"
    for i in range(20):
        store.add(db, synthetic_run(i, **({"slower": {"full": 1.035}} if i >= 17 else {})))
    assert cli.main(["history", "check", "--db", str(db)]) == 1
    alone = [line for line in capsys.readouterr().out.splitlines() if line.startswith("REGRESSION full/sdpa")]
    planted = PlantedAB({"full": 1.06})
    assert confirm_check(db, tmp_path, planted, monkeypatch) == 1
    assert [(b, a) for b, a, *_ in planted.asked] == [(commit_of(16), commit_of(17))]
    screened = [line for line in capsys.readouterr().out.splitlines() if line.startswith("REGRESSION full/sdpa")]
    assert len(alone) == 2 and len(screened) == len(LENGTHS) + 1, (alone, screened)


def test_confirm_refuses_bad_input_before_any_ab(history, tmp_path, capsys, monkeypatch):
    planted = PlantedAB({})
    monkeypatch.setattr(session, "measure", planted)
    assert cli.main(["history", "check", "--db", str(history), "--confirm"]) == 2
    assert "--confirm needs --grid" in capsys.readouterr().err
    other = tmp_path / "other.toml"
    other.write_text(GRID.format(lengths="64, 128"))  # another grid's cases
    assert cli.main(["history", "check", "--db", str(history), "--confirm", "--grid", str(other),
                     "--results-dir", str(tmp_path / "results")]) == 2
    assert "none of full/sdpa" in capsys.readouterr().err
    assert confirm_check(history, tmp_path, planted, monkeypatch, "--pairs", "1") == 2
    assert "--pairs 1" in capsys.readouterr().err
    assert planted.asked == []


@pytest.mark.slow
def test_a_real_ab_of_two_commits_that_share_the_path_does_not_confirm(tmp_path, capsys):
    """End to end: a history whose full/sdpa is 20% slower from this repository's HEAD on, and an A/B of
    HEAD~1 against HEAD (real worktrees, real workers, real SDPA timings), which do not differ there:
    not confirmed, exit 0, and the A/B's own folder kept beside the runs."""
    import subprocess

    from helpers import ROOT

    head, parent = (subprocess.run(["git", "rev-parse", ref], cwd=ROOT, capture_output=True, text=True).stdout.strip()
                    for ref in ("HEAD", "HEAD~1"))
    db = tmp_path / "h.duckdb"
    for i in range(17):
        store.add(db, synthetic_run(i, commit=head if i >= 14 else parent, **({"slower": {"full": 1.2}} if i >= 14 else {})))
    grid = tmp_path / "g.toml"
    grid.write_text(GRID.format(lengths=", ".join(map(str, LENGTHS))).replace(
        "threads = 1", "threads = 1\nmin_run_time_s = 0.02\nmax_samples = 10\ncase_timeout_s = 60"))
    code = cli.main(["history", "check", "--db", str(db), "--confirm", "--grid", str(grid), "--pairs", "2",
                     "--rounds", "1", "--repo", str(ROOT), "--results-dir", str(tmp_path / "results")])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "REGRESSION" not in out and out.count("\nnot confirmed ") == len(LENGTHS) + 1, out
    (folder,) = (tmp_path / "results").iterdir()
    assert folder.name.endswith("history-confirm-0") and (folder / "ab.parquet").is_file()
    assert "no regression" in (folder / "compare.md").read_text()  # its own table, as `suite ab` leaves it
    lines = (folder / "ab.jsonl").read_text().splitlines()
    assert len(lines) == len(LENGTHS) * 2 * 4  # every full/sdpa length, 2 pairs, A, B, B, A


@pytest.mark.slow
def test_a_real_ab_of_a_commit_that_slowed_the_path_confirms_it(tmp_path):
    """End to end, a real slowdown: a repository whose second commit makes `paced/native` 50% slower (its
    checkout holds a `pace_factor` module, tests/fault_variants.py), a history that stepped there, and
    `history check --confirm` as a process: the A/B checks both commits out, calls the series slower, exit 1."""
    import subprocess

    from helpers import paced_grid, suite
    from history_runs import cases

    lengths = (16, 17, 18, 19)
    repo = tmp_path / "repo"
    repo.mkdir()

    def git(*args):
        subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()

    git("init", "-q")
    (repo / "README").write_text("paced, as it was\n")
    git("add", "README")
    before = git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "before")
    (repo / "pace_factor.py").write_text(f"FACTOR = 1.5\nSLOW_N = {set(lengths)!r}\n")
    git("add", "pace_factor.py")
    after = git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "slower")
    made_of = (cases({("paced", "native"): (2.0, 2e-3 / 16**2)}, lengths, heads=1, head_dim=8),
               {("paced", "native"): (2.0, 2e-3 / 16**2)})
    db = tmp_path / "h.duckdb"
    for i in range(17):
        store.add(db, synthetic_run(i, commit=after if i >= 14 else before, made_of=made_of,
                                    **({"slower": {"paced": 1.5}} if i >= 14 else {})))
    grid = tmp_path / "g.toml"
    grid.write_text(paced_grid(lengths, "paced"))
    res = suite("history", "check", "--db", str(db), "--confirm", "--grid", str(grid), "--plugin", "fault_variants",
                "--pairs", "3", "--rounds", "1", "--repo", str(repo), "--results-dir", str(tmp_path / "results"),
                cwd=tmp_path)
    assert res.returncode == 1, res.stdout + res.stderr
    assert f"A/B of paced/native cpu float32 B=1 H=1 d=8 {before[:10]}..{after[:10]}: confirmed" in res.stdout, res.stdout
    assert "REGRESSION paced/native" in res.stdout and "not confirmed" not in res.stdout
