"""The history (issue 48): adding runs (idempotent, refused when foreign, unfinished or damaged, atomic),
change points and the tail's class on planted series, `history check`'s exit codes, the trend page."""

from __future__ import annotations

import base64
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("duckdb", reason='the `history` extra: pip install -e ".[history]"')
pytest.importorskip("asv", reason='the `history` extra: pip install -e ".[history]"')

from helpers import TESTS  # noqa: E402  (after the importorskips)
from history_runs import commit_of, run_folder, synthetic_run  # noqa: E402

from suite import cli  # noqa: E402
from suite.history import changes, store  # noqa: E402
from suite.store import lock  # noqa: E402

TIME = "2026-11-27T04:00:00+00:00"


def add(results: Path, name: str, db: Path, *extra: str) -> int:
    return cli.main(
        ["history", "add", name, "--results-dir", str(results), "--db", str(db), "--commit-time", TIME, *extra]
    )


def contents(db: Path) -> list[str]:
    """The database's rows as text (NaN compares equal to itself there)."""
    return [frame.to_json(orient="records", date_format="iso") for frame in store.read(db)]


# ------------------------------------------------------------------ adding
def test_adding_a_run_twice_adds_nothing(tmp_path, capsys):
    results, db = tmp_path / "results", tmp_path / "h.duckdb"
    run_folder(results, "r1", commit_of(1))
    assert add(results, "r1", db) == 0
    first = contents(db)
    assert add(results, "r1", db) == 0
    assert "already there, nothing added" in capsys.readouterr().out
    assert contents(db) == first
    runs, cases, exponents = store.read(db)
    assert len(runs) == 1 and len(cases) == 8 and len(exponents) == 2
    assert cases["time_lo_s"].notna().all() and (cases["time_lo_s"] <= cases["time_s"]).all()


def test_a_run_of_another_fingerprint_is_refused_and_changes_nothing(tmp_path, capsys):
    results, db = tmp_path / "results", tmp_path / "h.duckdb"
    run_folder(results, "r1", commit_of(1))
    run_folder(results, "r2", commit_of(2), fingerprint="fp0000000002", seed=1)
    assert add(results, "r1", db) == 0
    before = contents(db)
    assert add(results, "r2", db) == 2
    err = capsys.readouterr().err
    assert "fingerprint fp0000000002 (allowed: fp0000000001" in err and "--another-fingerprint" in err
    assert contents(db) == before


@pytest.mark.parametrize("damage", ["garbage", "cut"])
def test_a_damaged_database_exits_2_naming_it_and_what_to_do(tmp_path, capsys, damage):
    results, db = tmp_path / "results", tmp_path / "h.duckdb"
    run_folder(results, "r1", commit_of(1))
    run_folder(results, "r2", commit_of(2), seed=1)
    if damage == "garbage":
        db.write_bytes(b"not a database " * 1000)
    else:
        assert add(results, "r1", db) == 0
        db.write_bytes(db.read_bytes()[: db.stat().st_size // 2])
    damaged = db.read_bytes()
    assert add(results, "r2", db) == 2
    err = capsys.readouterr().err
    assert str(db) in err and "restore it from its copy" in err and "backfill" in err
    assert db.read_bytes() == damaged
    assert cli.main(["history", "check", "--db", str(db)]) == 2


def test_an_unfinished_run_is_refused(tmp_path, capsys):
    results, db = tmp_path / "results", tmp_path / "h.duckdb"
    run_folder(results, "stopped", commit_of(1), missing=2)
    assert add(results, "stopped", db) == 2
    assert "not finished: 2 of 8 cases not_run" in capsys.readouterr().err and not db.exists()
    run_folder(results, "measuring", commit_of(2))
    with lock.held(results / "measuring"):
        assert add(results, "measuring", db) == 2
    assert "being measured by pid" in capsys.readouterr().err and not db.exists()
    assert add(results, "measuring", db) == 0  # once its lock is let go


def test_a_run_with_uncommitted_changes_is_refused(tmp_path, capsys):
    results, db = tmp_path / "results", tmp_path / "h.duckdb"
    run_folder(results, "dirty", commit_of(1) + "-dirty")
    assert add(results, "dirty", db) == 2
    assert "git_commit" in capsys.readouterr().err and not db.exists()


def test_an_add_that_fails_half_way_leaves_the_database_as_it_was(tmp_path):
    db = tmp_path / "h.duckdb"
    assert store.add(db, synthetic_run(0))
    before = contents(db)
    broken = synthetic_run(1)
    bad = broken.exponents.assign(slope="not a number")  # its runs row and cases go in first
    with pytest.raises(Exception):
        store.add(db, broken.__class__(**{**broken.__dict__, "exponents": bad}))
    assert contents(db) == before
    assert store.add(db, broken)  # the same run, whole, goes in afterwards


KILLED = """
import os, signal, sys
sys.path.insert(0, {tests!r})
import pandas as pd
from history_runs import synthetic_run
from suite.history import store
run = synthetic_run(1)
real, calls = pd.DataFrame.assign, []
def assign(self, **kw):  # the second frame of the add: its runs row and cases are in, not yet committed
    calls.append(1)
    if len(calls) == 2:
        os.kill(os.getpid(), signal.SIGKILL)
    return real(self, **kw)
pd.DataFrame.assign = assign
store.add({db!r}, run)
"""


@pytest.mark.slow
def test_a_killed_add_leaves_the_database_as_it_was(tmp_path):
    db = tmp_path / "h.duckdb"
    assert store.add(db, synthetic_run(0))
    before = contents(db)
    code = KILLED.format(tests=str(TESTS), db=str(db))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == -9, done.stderr[-2000:]
    assert contents(db) == before
    assert store.add(db, synthetic_run(1)) and len(store.read(db)[0]) == 2


# ------------------------------------------------------------------ change points and classes
def planted(kind: str, shape: str, count: int = 40, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if kind == "time":
        y = 0.01 * np.exp(rng.normal(0, 0.02, count))
        step = {"regression": 1.10, "improvement": 1 / 1.10, "old": 1.10}.get(shape)
    else:
        y = 1.0 + rng.normal(0, 0.02, count)
        step = {"regression": 0.3, "improvement": -0.3, "old": 0.3}.get(shape)
    if step is not None:
        at = count - 3 if shape != "old" else count // 2
        if kind == "time":
            y[at:] *= step
        else:
            y[at:] += step
    return y


@pytest.mark.parametrize("kind", ["time", "exponent"])
@pytest.mark.parametrize(
    "shape, expected",
    [("regression", "regression"), ("improvement", "improvement"), ("old", "suspicious"), ("flat", "no change")],
)
def test_planted_series_are_classed_as_hud_names_them(kind, shape, expected):
    y = planted(kind, shape)
    found = changes.change_points(y, kind)
    assert changes.classify(len(y), found) == expected
    if shape != "flat":
        where = len(y) - 3 if shape != "old" else len(y) // 2
        change = found[-1]
        assert (change.before, change.after) == (where - 1, where)
        size = {"time": 0.10, "exponent": 0.3}[kind] * (-1 if shape == "improvement" else 1)
        if kind == "time" and shape == "improvement":
            size = 1 / 1.10 - 1
        assert change.lo <= size <= change.hi and change.lo < change.size < change.hi
    assert changes.classify(changes.MIN_POINTS - 1, found[:0]) == "insufficient data"


@pytest.mark.parametrize("kind", ["time", "exponent"])
def test_an_old_speedup_is_no_change_and_a_slowdown_is_new_for_the_recent_points(kind):
    """Suspicious is an old slowdown only; a slowdown is the newest change (a regression) while it lies
    within the newest changes.RECENT points, and suspicious from one point further back."""

    def stepped(back: int, slower: bool) -> np.ndarray:
        y = planted(kind, "flat")
        if kind == "time":
            y[len(y) - back :] *= 1.10 if slower else 1 / 1.10
        else:
            y[len(y) - back :] += 0.3 if slower else -0.3
        return y

    faster = stepped(20, slower=False)
    found = changes.change_points(faster, kind)
    assert found and found[-1].after == 20 and changes.classify(len(faster), found) == "no change"
    for back, expected in ((changes.RECENT, "regression"), (changes.RECENT + 1, "suspicious")):
        y = stepped(back, slower=True)
        assert changes.classify(len(y), changes.change_points(y, kind)) == expected, (kind, back)


def test_one_slow_point_at_the_end_is_not_yet_a_change():
    y = planted("time", "flat")
    y[-1] *= 1.5
    assert changes.classify(len(y), changes.change_points(y)) == "no change"


def shared_host(tail: list[float], odd: float = 1.13, seed: int = 1) -> np.ndarray:
    """57 nights of 1.5% noise, every seventh one `odd` times the others (a shared host's slow night:
    the steady grid measured 10-31% ones, docs/history.md), then `tail` (factors)."""
    rng = np.random.default_rng(seed)
    y = 0.01 * np.exp(rng.normal(0, 0.015, 57))
    y[3::7] *= odd
    return np.concatenate([y, 0.01 * np.array(tail)])


@pytest.mark.parametrize("odd, factor, expected", [(1.13, 1.10, "regression"), (1 / 1.13, 1 / 1.10, "improvement")])
def test_three_nights_past_the_band_are_a_change_where_odd_nights_hide_it_from_the_levels(odd, factor, expected):
    y = shared_host([factor] * 3, odd)
    levels = changes.level_changes(np.log(y), "time", changes.THRESHOLD["time"])
    assert changes.classify(len(y), levels) == "no change"  # the odd nights outrank the step's three
    found = changes.change_points(y)
    assert changes.classify(len(y), found) == expected
    change = found[-1]
    assert (change.before, change.after) == (56, 57)
    assert 0.08 < abs(change.size) < 0.12 and change.lo < change.size < change.hi and change.lo * change.hi > 0


def test_the_tails_rule_judges_a_series_not_one_case():
    """One case's odd nights come too often for three in a row to be rare (docs/history.md): a case is
    judged by its levels alone, its series' lengths together (and the host's level, an exponent) with the tail too."""
    from suite.history.series import _one

    y = shared_host([1.10] * 3)
    rows = pd.DataFrame(
        {
            "series_key": "s",
            "series": "s",
            "label": "s",
            "seq_len": 512.0,
            "claimed": np.nan,
            "git_commit": [commit_of(i) for i in range(len(y))],
            "run": range(len(y)),
            "value": y,
        }
    )
    assert _one("time", "s n=512", rows, "value")[0]["class"] == "no change"
    verdict, found = _one("lengths", "s", rows, "value")
    assert verdict["class"] == "regression" and found[-1]["before_run"] == 56 and found[-1]["after_run"] == 57


@pytest.mark.parametrize(
    "tail", [[1.10, 1.10, 1.0], [1.0, 1.10, 1.10], [1.13, 1.13, 1.0], [1.13, 0.98, 1.13], [1.04, 1.04, 1.04]]
)
def test_two_nights_past_the_band_or_three_inside_it_are_no_change(tail):
    y = shared_host(tail)
    assert changes.classify(len(y), changes.change_points(y)) == "no change"


def _alternating(robust_sd: float, count: int = 20) -> np.ndarray:
    """A level whose median is 0 and robust sd (MAD x 1.4826) exactly `robust_sd`: ±a in turn."""
    a = robust_sd / 1.482602218505602
    return np.array([a if i % 2 else -a for i in range(count)])


@pytest.mark.parametrize("beyond, flagged", [(0.095, True), (0.07, False), (-0.095, True), (-0.07, False)])
def test_the_band_is_two_robust_sds_where_the_level_is_noisier_than_the_threshold(beyond, flagged):
    """A level of robust sd 4%: its band is 8% (BAND x sd), not the 5% threshold: three nights 7% slow
    are inside it, three 9.5% slow beyond it (a band of 1.5 or 3 sds fails one of these)."""
    y = np.concatenate([_alternating(0.04), [beyond] * changes.TAIL])
    change = changes.tail_change(y, "time", changes.THRESHOLD["time"])
    assert (change is not None) == flagged, change
    if flagged:
        assert change.slower == (beyond > 0) and (change.before, change.after) == (19, 20)


def test_the_tail_is_judged_only_against_a_level_of_min_points():
    """A level that began six points before the tail (a change point there) is too short to give a band:
    the tail is not judged against it, however far beyond it lies."""
    y = np.concatenate([_alternating(0.01, 14), 0.3 + _alternating(0.01, 6), [0.6] * changes.TAIL])
    assert [c.after for c in changes.level_changes(y[: -changes.TAIL], "time", changes.THRESHOLD["time"])] == [14]
    assert changes.tail_change(y, "time", changes.THRESHOLD["time"]) is None
    longer = np.concatenate(
        [_alternating(0.01, 14), 0.3 + _alternating(0.01, changes.MIN_POINTS), [0.6] * changes.TAIL]
    )
    assert changes.tail_change(longer, "time", changes.THRESHOLD["time"]) is not None


# ------------------------------------------------------------------ check and report
def check(db: Path, *extra: str) -> int:
    return cli.main(["history", "check", "--db", str(db), *extra])


def test_check_exits_1_naming_the_slowdowns_their_size_and_commits(history, capsys):
    assert check(history) == 1
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith("REGRESSION")]
    assert len(lines) == 4 + 4 + 2 + 1  # full's four lengths, linear's four (steeper), each one's lengths together,
    # linear's exponent
    assert f"in {commit_of(13)[:10]}..{commit_of(14)[:10]}" in lines[0]
    full = [float(m.group(1)) for line in lines if (m := re.search(r"full/sdpa.* time n=\d+ \+([\d.]+)%", line))]
    assert len(full) == 4 and all(10 < size < 30 for size in full), full  # planted: +20%
    assert any("linear/native" in line and "exponent in n +0.3" in line for line in lines)
    together = [
        float(m.group(1)) for line in lines if (m := re.search(r"full/sdpa.* its lengths together \+([\d.]+)%", line))
    ]
    assert len(together) == 1 and 15 < together[0] < 25, together  # planted: +20% at every length


def test_check_names_only_the_newest_change_of_a_series_that_stepped_twice(tmp_path, capsys):
    """full/sdpa 20% slower from the eighth run (an old change, long since the level) and 20% more from the 17th:
    check names the second, at its commits; the first is history, not a regression to act on."""
    db = tmp_path / "h.duckdb"
    for i in range(20):
        store.add(db, synthetic_run(i, **({"slower": {"full": 1.2 if i < 17 else 1.44}} if i >= 8 else {})))
    assert check(db) == 1
    lines = [line for line in capsys.readouterr().out.splitlines() if "full/sdpa" in line]
    assert lines and all(line.startswith("REGRESSION") for line in lines), lines
    assert all(f"in {commit_of(16)[:10]}..{commit_of(17)[:10]}" in line for line in lines), lines
    assert len(lines) == 4 + 1  # full's four lengths and their lengths together


def test_a_slowdown_with_no_commit_between_is_the_machines_and_only_warns(tmp_path, capsys):
    """The same code measured before and after a slowdown (nightly reruns of one commit, or an A/A
    history): no commit can have made it (docs/history.md measured 30 such runs flagged at 4 nights)."""
    db = tmp_path / "h.duckdb"
    for i in range(17):
        store.add(db, synthetic_run(i, commit=commit_of(min(i, 13)), **({"slower": {"full": 1.2}} if i >= 14 else {})))
    assert check(db) == 0
    out = capsys.readouterr().out
    assert "REGRESSION" not in out
    warned = [line for line in out.splitlines() if line.startswith("slower with no commit between")]
    assert len(warned) == 4 + 1 and all("full/sdpa" in line and "no commit between" in line for line in warned)


@pytest.mark.slow
def test_check_exits_0_without_a_step_and_2_when_it_cannot_judge(tmp_path, capsys):
    db = tmp_path / "h.duckdb"
    for i in range(5):
        store.add(db, synthetic_run(i))
    assert check(db) == 2
    assert "a series needs 8 points" in capsys.readouterr().err
    for i in range(5, 14):
        store.add(db, synthetic_run(i))
    assert check(db) == 0
    assert store.add(db, synthetic_run(99, fingerprint="fp0000000002"), another_fingerprint=True)
    assert check(db) == 2
    assert "choose one with --fingerprint" in capsys.readouterr().err
    assert check(db, "--fingerprint", "fp0000000001") == 0
    assert check(tmp_path / "absent.duckdb") == 2


def test_report_shows_every_series_its_change_points_and_figures(history, tmp_path):
    page = tmp_path / "page" / "index.html"
    assert cli.main(["history", "report", "--db", str(history), "-o", str(page)]) == 0
    html = page.read_text()
    summary = html[html.index('id="summary"') : html.index('id="series"')]
    assert summary.count('class="regression">regression') == 3  # both series, and linear's exponent
    assert f"{commit_of(13)[:10]}..{commit_of(14)[:10]}" in html
    labels = re.findall(r"<tr><td>([^<]+)</td>", html[html.index('id="series"') :])
    assert labels.count("time, its lengths together") == 2 and labels.count("exponent in n") == 1, labels
    images = re.findall(r'<img[^>]*src="([^"]+)"', html)
    assert len(images) == 2 and all(base64.b64decode(s.split(",", 1)[1])[:4] == b"\x89PNG" for s in images)
    assert "<script" not in html and not re.search(r'(src|href)="(https?:)?//', html)


@pytest.mark.slow
def test_report_renders_in_headless_chromium(history, tmp_path):
    from helpers import IMAGE_WIDTHS, in_browser

    page_path = tmp_path / "index.html"
    assert cli.main(["history", "report", "--db", str(history), "-o", str(page_path)]) == 0
    errors, (widths, rows) = in_browser(
        page_path, IMAGE_WIDTHS, "document.querySelectorAll('#summary ~ table tr').length"
    )
    assert errors == [] and len(widths) == 2 and all(w > 500 for w in widths) and rows >= 3


# ------------------------------------------------------------------ backfill's range
def git_repo(repo: Path, count: int) -> list[str]:
    """A repository of `count` commits; their hashes, oldest first."""
    repo.mkdir()
    git = lambda *a: subprocess.run(["git", *a], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()  # noqa: E731
    git("init", "-q")
    for i in range(count):
        (repo / "f").write_text(str(i))
        git("add", "f")
        git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", f"c{i}")
    return git("rev-list", "--reverse", "HEAD").split()


def test_backfill_reads_its_range_as_git_does_and_refuses_a_bad_one(tmp_path, capsys):
    from suite.history.backfill import commits

    repo = tmp_path / "repo"
    made = git_repo(repo, 4)
    assert commits("HEAD~2..HEAD", repo) == made[2:]
    assert commits("HEAD~2^..HEAD", repo) == made[1:]
    for bad in ("HEAD", "HEAD..", "nosuch..HEAD", "HEAD..HEAD~2", "HEAD~1..HEAD:x"):
        assert (
            cli.main(
                ["history", "backfill", bad, "--grid", "smoke", "--repo", str(repo), "--db", str(tmp_path / "h.duckdb")]
            )
            == 2
        )
    assert "A..B" in capsys.readouterr().err and not (tmp_path / "h.duckdb").exists()


def test_backfill_measures_in_a_seeded_shuffled_order_by_default_and_records_it(tmp_path, monkeypatch, capsys):
    """A host's drift over a backfill's hours must not line up with the commits' order: by default the
    commits are measured shuffled (seeded: the same seed, the same order), the order is printed and
    recorded; `--order sequential` measures oldest first."""
    import json

    from suite.history import backfill, runs

    repo, results = tmp_path / "repo", tmp_path / "results"
    made = git_repo(repo, 9)[1:]  # the root commit has no parent: the range is HEAD~8..HEAD
    measured: list[str] = []
    monkeypatch.setattr(backfill, "measure", lambda commit, *a: measured.append(commit) or results)
    monkeypatch.setattr(runs, "load", lambda *a, **k: None)
    monkeypatch.setattr(store, "add", lambda *a, **k: True)

    def run(*extra: str) -> list[str]:
        measured.clear()
        assert (
            cli.main(
                [
                    "history",
                    "backfill",
                    "HEAD~8..HEAD",
                    "--grid",
                    "smoke",
                    "--repo",
                    str(repo),
                    "--results-dir",
                    str(results),
                    "--db",
                    str(tmp_path / "h.duckdb"),
                    *extra,
                ]
            )
            == 0
        )
        return list(measured)

    shuffled = run()
    assert sorted(shuffled) == sorted(made) and shuffled != made
    assert "measured in shuffled (seed 0) order: " + " ".join(c[:12] for c in shuffled) in capsys.readouterr().err
    assert run("--seed", "0") == shuffled and run("--seed", "1") not in (shuffled, made)
    assert run("--order", "sequential") == made
    lines = [json.loads(line) for line in (results / backfill.ORDERS).read_text().splitlines()]
    assert [(line["order"], line["seed"], line["commits"]) for line in lines] == [
        ("shuffled", 0, shuffled),
        ("shuffled", 0, shuffled),
        ("shuffled", 1, lines[2]["commits"]),
        ("sequential", None, made),
    ]
