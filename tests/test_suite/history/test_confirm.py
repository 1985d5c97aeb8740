"""`history check --confirm` (issue 48): the screen's candidates, and each slowdown measured again as an
interleaved A/B of its two commits before it fails the check (the A/B here a stand-in with planted ratios;
tests/test_suite/run/test_ab_sweeps.py runs real ones)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("duckdb", reason='the `history` extra: pip install -e ".[history]"')
pytest.importorskip("asv", reason='the `history` extra: pip install -e ".[history]"')

from history_runs import LENGTHS, commit_of, synthetic_run  # noqa: E402  (after the importorskips)

from suite import cli  # noqa: E402
from suite.analyse import paired  # noqa: E402
from suite.history import changes, store  # noqa: E402
from suite.run.ab import checkouts, session  # noqa: E402

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
    """`count` nights of `sd` log noise at a hundredth of a second, then the tail's ratios (times in seconds)."""
    rng = np.random.default_rng(seed)
    return 0.01 * np.exp(np.r_[rng.normal(0, sd, count), np.log(tail)])


# ------------------------------------------------------------------ the screen
@pytest.mark.parametrize(
    "tail,screened",
    [
        ([1.04, 1.05, 1.035], True),
        ([1.10, 0.98, 1.06], True),
        ([1.02, 1.025, 1.01], False),
        ([0.95, 0.96, 0.94], False),
    ],
)
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
        assert math.isclose(
            found.size, float(np.median(y[30:]) / np.median(y[:30]) - 1), rel_tol=1e-6
        )  # a median of logs
    found, status = changes.judged(y, "time", tail=False, screen=True)
    assert status == "no change" and (bool(found) and found[-1].rule == "screen") == screened  # no class of its own
    assert changes.judged(y, "time", tail=False) == ([], "no change")


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
                    lines.append(
                        {
                            **case.key,
                            "case_id": case.case_id,
                            "side": side,
                            "pair": pair,
                            "position": position,
                            "status": "ok",
                            "reason": "",
                            "time_s": 1e-3 * ratio * math.exp(offset[side] + rng.normal(0, 0.01)),
                        }
                    )
        return paired.blocks(lines)


def confirm_check(
    db: Path, tmp_path: Path, planted: PlantedAB, monkeypatch, *extra: str, resolvable: bool = True
) -> int:
    """`check --confirm` with `planted` for the A/Bs; `resolvable`: every commit resolves (the synthetic
    histories' commits are names, in no repository)."""
    grid = tmp_path / "g.toml"
    grid.write_text(GRID.format(lengths=", ".join(map(str, LENGTHS))))
    monkeypatch.setattr(session, "measure", planted)
    if resolvable:
        monkeypatch.setattr(checkouts, "resolve", lambda field, given, repo, hint="": given)
    return cli.main(
        [
            "history",
            "check",
            "--db",
            str(db),
            "--confirm",
            "--grid",
            str(grid),
            "--results-dir",
            str(tmp_path / "results"),
            *extra,
        ]
    )


def test_a_slowdown_the_ab_calls_again_fails_the_check_and_one_it_does_not_only_warns(
    history, tmp_path, capsys, monkeypatch
):
    """full/sdpa's +20% is re-measured and called (exit 1); linear's slower times (its steeper exponent)
    are re-measured and not called by this A/B, so they only warn; the exponent is not re-measured. Each
    A/B is the commit before the slowdown against the newest run's."""
    planted = PlantedAB({"full": 1.2})
    assert confirm_check(history, tmp_path, planted, monkeypatch, "--pairs", "6") == 1
    out = capsys.readouterr().out
    assert {(b, a) for b, a, *_ in planted.asked} == {(commit_of(13), commit_of(16))}
    assert len(planted.asked) == 2 and all(
        len(ids) == len(LENGTHS) and pairs == 6 and rounds == 2 for _, _, ids, pairs, rounds in planted.asked
    )  # every length, ab's rounds
    regressions = [line for line in out.splitlines() if line.startswith("REGRESSION")]
    assert regressions and all("full/sdpa" in line or "exponent in n" in line for line in regressions), regressions
    assert any(
        line.startswith("A/B of full/sdpa") and ": confirmed; A/B " in line and "slower" in line
        for line in out.splitlines()
    )
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
    assert [(b, a) for b, a, *_ in planted.asked] == [(commit_of(16), commit_of(19))]
    screened = [line for line in capsys.readouterr().out.splitlines() if line.startswith("REGRESSION full/sdpa")]
    assert len(alone) == 2 and len(screened) == len(LENGTHS) + 1, (alone, screened)


def test_confirm_refuses_bad_input_before_any_ab(history, tmp_path, capsys, monkeypatch):
    planted = PlantedAB({})
    monkeypatch.setattr(session, "measure", planted)
    assert cli.main(["history", "check", "--db", str(history), "--confirm"]) == 2
    assert "--confirm needs --grid" in capsys.readouterr().err
    other = tmp_path / "other.toml"
    other.write_text(GRID.format(lengths="64, 128"))  # another grid's cases
    assert (
        cli.main(
            [
                "history",
                "check",
                "--db",
                str(history),
                "--confirm",
                "--grid",
                str(other),
                "--results-dir",
                str(tmp_path / "results"),
            ]
        )
        == 2
    )
    assert "none of full/sdpa" in capsys.readouterr().err
    assert confirm_check(history, tmp_path, planted, monkeypatch, "--pairs", "1") == 2
    assert "--pairs 1" in capsys.readouterr().err
    assert cli.main(["history", "check", "--db", str(history), "--pairs", "6"]) == 2  # without --confirm
    assert "--pairs: only with --confirm" in capsys.readouterr().err
    assert planted.asked == []


def test_an_adaptive_series_is_measured_at_the_lengths_its_runs_climbed(tmp_path):
    """A grid with adaptive lengths starts at a few; the history's newest run climbed further. The A/B's
    grid holds every length of the series the newest run has, made from the ladder."""
    from suite.history import confirm
    from suite.plan import grid as grids

    path = tmp_path / "ladder.toml"
    path.write_text(GRID.format(lengths="256").replace("seq_len = [256]", "seq_len = { min = 256, max = 65536 }"))
    grid = grids.resolve(str(path))
    climbed = [case for case in grid.ladders[0].start()] + [grid.ladders[0].case(16384)]
    ask = confirm.Asked(
        grid.ladders[0].key, "full/sdpa", "a", "b", tuple(c.case_id for c in climbed), tuple(c.seq_len for c in climbed)
    )
    assert 16384 not in {c.seq_len for c in grid.cases if c.variant == "full"}
    narrowed = confirm.narrowed(grid, ask)
    assert sorted(c.seq_len for c in narrowed.cases) == sorted(ask.lengths) and narrowed.ladders == ()


def two_commits(tmp_path: Path, factor: float, lengths) -> tuple[Path, str, str, Path]:
    """A throwaway repository whose second commit makes `paced/native` `factor` times slower at `lengths`
    (its checkout holds a `pace_factor` module: tests/fault_variants.py; 1.0: the same speed), a history
    of it that stepped 50% there, and the paced grid: (repository, first commit, second, database)."""
    import subprocess

    from history_runs import cases

    repo = tmp_path / "repo"
    repo.mkdir()

    def commit(name: str, text: str, message: str) -> str:
        (repo / name).write_text(text)
        for args in (["add", name], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", message]):
            subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True).stdout.strip()

    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    before = commit("README", "paced, as it was\n", "before")
    after = commit("pace_factor.py", f"FACTOR = {factor}\nSLOW_N = {set(lengths)!r}\n", "the change")
    series = {("paced", "native"): (2.0, 2e-3 / 16**2)}
    made_of = (cases(series, lengths, heads=1, head_dim=8), series)
    db = tmp_path / "h.duckdb"
    for i in range(17):
        store.add(
            db,
            synthetic_run(
                i,
                commit=after if i >= 14 else before,
                made_of=made_of,
                **({"slower": {"paced": 1.5}} if i >= 14 else {}),
            ),
        )
    return repo, before, after, db


@pytest.mark.slow
@pytest.mark.parametrize("factor,code", [(1.5, 1), (1.0, 0)])
def test_a_real_ab_confirms_a_commit_that_slowed_the_path_and_not_one_that_did_not(tmp_path, factor, code):
    """End to end, `history check --confirm` as a process on a history that stepped 50% at a commit: the A/B
    checks both commits out (real worktrees, real workers). Where the commit slowed the path it calls it
    (exit 1); where it did not (the history's step was the host's), the slowdown only warns (exit 0), and
    the A/B's folder keeps its blocks and its table."""
    from helpers import paced_grid, suite

    lengths = (16, 17, 18, 19)
    repo, before, after, db = two_commits(tmp_path, factor, lengths)
    grid = tmp_path / "g.toml"
    grid.write_text(paced_grid(lengths, "paced"))
    res = suite(
        "history",
        "check",
        "--db",
        str(db),
        "--confirm",
        "--grid",
        str(grid),
        "--plugin",
        "fault_variants",
        "--pairs",
        "3",
        "--rounds",
        "1",
        "--repo",
        str(repo),
        "--results-dir",
        str(tmp_path / "results"),
        cwd=tmp_path,
    )
    assert res.returncode == code, res.stdout + res.stderr
    said = "confirmed" if code else "not confirmed"
    assert f"A/B of paced/native cpu float32 B=1 H=1 d=8 {before[:10]}..{after[:10]}: {said}" in res.stdout, res.stdout
    assert ("REGRESSION paced/native" in res.stdout) == bool(code)
    assert res.stdout.count("\nnot confirmed ") == (0 if code else len(lengths) + 1), res.stdout
    (folder,) = (tmp_path / "results").iterdir()
    assert folder.name.endswith("history-confirm-0") and (folder / "ab.parquet").is_file()
    assert ("no regression" in (folder / "compare.md").read_text()) != bool(code)
    assert len((folder / "ab.jsonl").read_text().splitlines()) == len(lengths) * 3 * 4  # 3 pairs of A, B, B, A


def test_a_slowdown_whose_commit_is_not_in_the_repository_stands(tmp_path, capsys, monkeypatch):
    """A history whose commits --repo lacks (a shallow clone's): nothing to A/B, so the slowdown stands
    (exit 1) and says why; no A/B is run."""
    db = tmp_path / "h.duckdb"
    for i in range(17):
        store.add(db, synthetic_run(i, **({"slower": {"full": 1.2}} if i >= 14 else {})))
    repo = tmp_path / "empty"
    repo.mkdir()
    import subprocess

    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    planted = PlantedAB({})
    assert confirm_check(db, tmp_path, planted, monkeypatch, "--repo", str(repo), resolvable=False) == 1
    out = capsys.readouterr().out
    assert planted.asked == [] and "the slowdown stands; not measured: the commit before the slowdown" in out
    assert "REGRESSION full/sdpa" in out


def test_a_history_commit_that_names_a_folder_exits_2_and_chooses_no_code(tmp_path, monkeypatch):
    """A history's git_commit is data: one that is a folder here (a `suite` package in it) is neither an A/B
    side nor asked of git; anything but a full hash exits 2 naming the field, before any A/B."""
    from suite.analyse.gate import Rule
    from suite.errors import UsageError
    from suite.history import confirm
    from suite.plan import grid as grids

    for name in ("before", "payload"):
        (tmp_path / name / "suite").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "g.toml"
    path.write_text(GRID.format(lengths=", ".join(map(str, LENGTHS))))
    grid = grids.resolve(str(path))
    case = grid.cases[0]
    planted = PlantedAB({})
    for before, after in (
        ("before", "payload"),
        (commit_of(1), "payload"),
        (commit_of(1), commit_of(2)[:12]),
        (commit_of(1).upper(), commit_of(2)),
    ):
        ask = confirm.Asked("k", "full/sdpa", before, after, (case.case_id,), (case.seq_len,))
        with pytest.raises(UsageError, match="git_commit .*allowed: a full commit hash, 40 or 64 hex digits"):
            confirm.confirm([ask], grid, Path("."), tmp_path / "results", 2, 1, [], Rule(), measure=planted)
    assert planted.asked == [] and not (tmp_path / "results").exists()
