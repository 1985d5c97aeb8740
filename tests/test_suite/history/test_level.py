"""Each case judged against its run's level (suite.history.level): a host that shifts every case of a run
together is not a change of any case, a change of one case still is, a change of every case at once is
reported as the host's level (not lost), and runs with too few cases for a level, or a history where the
level adds more noise than it removes, are judged raw, said so."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("duckdb", reason='the `history` extra: pip install -e ".[history]"')
pytest.importorskip("asv", reason='the `history` extra: pip install -e ".[history]"')

from history_runs import commit_of  # noqa: E402  (after the importorskips)

from suite import cli  # noqa: E402
from suite.history import level, points, store  # noqa: E402
from suite.history.store import Run  # noqa: E402
from suite.plan.case import Case  # noqa: E402
from suite.store import table  # noqa: E402
from suite.store.row import Row  # noqa: E402

SERIES = (("full", "sdpa"), ("full", "dense"), ("full", "flex"), ("linear", "native"))  # four series
LENGTHS = (512, 1024)
RUNS, STEP_AT = 20, 17  # a step in the last 3 runs


def _run(i: int, host: float, slower: dict, series=SERIES, noise: float = 0.01, commit: str | None = None) -> Run:
    """Run i: every case × `host` (the host's level in that run), the cases of `slower` {(variant, impl, n)
    or (variant, impl): factor} slower, each case's own noise `noise` (log sd)."""
    rng = np.random.default_rng(i)
    cases = [
        Case(variant, impl, "cpu", "float32", "fwd", 1, n, 2, 2, 16, False) for variant, impl in series for n in LENGTHS
    ]
    rows = []
    for case in cases:
        factor = slower.get((case.variant, case.impl, case.seq_len), slower.get((case.variant, case.impl), 1.0))
        t = 1e-6 * case.seq_len**1.5 * host * factor * float(np.exp(rng.normal(0, noise)))
        # NB: the calls' own jitter small beside `noise`: the fastest call (what is judged) moves as t does
        rows.append(
            Row(case, finished_at=1.8e9 + 86400 * i, replicates=1, claimed_exponent_n=1.5).with_samples(
                list(t * np.exp(rng.normal(0, 0.001, 8)))
            )
        )
    frame = table.table(cases, rows)
    return Run(
        run_key=f"run{i:05d}",
        fingerprint_id="fp0000000001",
        git_commit=commit or commit_of(i),
        commit_time=pd.Timestamp(1.8e9 + 86400 * i - 3600, unit="s", tz="UTC"),
        run_time=pd.Timestamp(1.8e9 + 86400 * i, unit="s", tz="UTC"),
        run_name=f"nightly-{i}",
        grid="synthetic",
        env=json.dumps({"fingerprint_id": "fp0000000001"}),
        cases=points.case_points(frame),
        exponents=points.exponent_points(frame),
    )


def history(
    db: Path, hosts, slower_from_step: dict | None = None, series=SERIES, small=(), rerun: bool = False
) -> Path:
    """A history of len(hosts) runs: run i at host level hosts[i]; `slower_from_step` from STEP_AT on;
    the runs in `small` measure only the first two series (too few for a level); `rerun`: the runs from
    STEP_AT on measure the commit of the run before (the same code again)."""
    for i, host in enumerate(hosts):
        slower = slower_from_step if slower_from_step and i >= STEP_AT else {}
        commit = commit_of(STEP_AT - 1) if rerun and i >= STEP_AT else None
        store.add(db, _run(i, host, slower, series[:2] if i in small else series, commit=commit))
    return db


def check(db: Path, capsys, *extra: str) -> tuple[int, list[str]]:
    code = cli.main(["history", "check", "--db", str(db), *extra])
    return code, capsys.readouterr().out.splitlines()


def busy_host(seed: int = 7) -> np.ndarray:
    """A shared host's level: ±8% from run to run, every case of a run alike."""
    return np.exp(np.random.default_rng(seed).normal(0, 0.08, RUNS))


# ------------------------------------------------------------------ the rule on a matrix
def test_a_case_is_judged_against_the_other_series_of_its_run():
    logs = np.log(
        np.array(
            [
                [1.0, 1.2, 1.0, 1.5],  # a: series x
                [2.0, 2.4, 2.0, 2.0],  # b: series x (its own series: not a's control)
                [3.0, 3.6, 3.0, 3.0],  # c: series y
                [4.0, 4.8, 4.0, 4.0],  # d: series z
                [5.0, 6.0, 5.0, 5.0],
            ]
        )
    )  # e: series w
    own, host = level.levels(logs, ["x", "x", "y", "z", "w"])
    assert np.allclose(own[:, 1], np.log(1.2))  # the second run: every case 20% slower, each one's level says so
    assert np.allclose(own[0, 3], 0) and np.allclose(own[2, 3], 0)  # the fourth run: a alone slower: no level moves
    assert np.allclose(host, [0, np.log(1.2), 0, 0])
    few = level.levels(logs[:3], ["x", "x", "y"])  # 3 cases of 2 series: no level anywhere
    assert np.isnan(few[0]).all() and np.isnan(few[1]).all()


# ------------------------------------------------------------------ check
@pytest.mark.slow
def test_a_host_that_shifts_every_case_together_is_no_change_of_a_case(tmp_path, capsys):
    """(a) Every case of a run shifts with the host, which drifts 30% slower over the last runs: no case
    is flagged; the level's change is reported as the host's (every case at once)."""
    hosts = busy_host() * np.r_[np.ones(STEP_AT), 1.3, 1.32, 1.35]
    code, out = check(history(tmp_path / "h.duckdb", hosts), capsys)
    assert not [line for line in out if line.startswith(("REGRESSION", "suspicious full", "suspicious linear"))], out
    host = [line for line in out if line.startswith("HOST LEVEL REGRESSION")]
    assert len(host) == 1 and "every case slower at once" in host[0] and code == 1
    assert f"{commit_of(STEP_AT - 1)[:10]}..{commit_of(STEP_AT)[:10]}" in host[0]
    assert "judged against its run's level" in out[1]
    code, out = check(tmp_path / "h.duckdb", capsys, "--host-level", "warn")
    assert code == 0 and any(line.startswith("host level slower (warning only") for line in out)


@pytest.mark.slow
def test_one_case_that_steps_10_percent_on_a_busy_host_is_flagged(tmp_path, capsys):
    """(b) The host moves every run ±8%; one case steps 10% and the others do not: that case is flagged,
    no other case is, and the host's level has no change."""
    db = history(tmp_path / "h.duckdb", busy_host(), {("full", "sdpa", 1024): 1.10})
    code, out = check(db, capsys)
    flagged = [line for line in out if line.startswith("REGRESSION")]
    assert code == 1 and len(flagged) == 1, out
    assert "full/sdpa" in flagged[0] and "time n=1024" in flagged[0]
    assert f"in {commit_of(STEP_AT - 1)[:10]}..{commit_of(STEP_AT)[:10]}" in flagged[0]
    assert not any("host level" in line for line in out)


@pytest.mark.slow
def test_every_case_slower_at_one_commit_is_reported_not_lost(tmp_path, capsys):
    """(c) A real regression of every case at once (a library upgrade): 15% from one commit on and kept.
    Judged against the level no case changed, so the level's change fails the check, once, named."""
    db = history(tmp_path / "h.duckdb", np.ones(RUNS), {s: 1.15 for s in SERIES})
    code, out = check(db, capsys)
    host = [line for line in out if line.startswith("HOST LEVEL REGRESSION")]
    assert code == 1 and len(host) == 1, out
    size = float(host[0].split()[3].rstrip("%"))
    assert abs(size - 15) < 0.5 and f"in {commit_of(STEP_AT - 1)[:10]}..{commit_of(STEP_AT)[:10]}" in host[0]
    assert "a commit that slowed everything" in host[0]
    assert not [line for line in out if line.startswith("REGRESSION")]
    page = tmp_path / "index.html"
    assert cli.main(["history", "report", "--db", str(db), "-o", str(page)]) == 0
    html = page.read_text()
    section = html[html.index('id="host"') : html.index('id="series"')]
    assert "<img" in section and f"{commit_of(STEP_AT - 1)[:10]}..{commit_of(STEP_AT)[:10]}" in section
    assert 'class="regression">regression' in section


def test_every_case_slower_with_no_commit_between_is_the_hosts_and_only_warns(tmp_path, capsys):
    """The same code measured again, every case 15% slower: the host's level changed, no code did."""
    db = history(tmp_path / "h.duckdb", np.ones(RUNS), {s: 1.15 for s in SERIES}, rerun=True)
    code, out = check(db, capsys)
    warned = [line for line in out if line.startswith("host level slower with no commit between")]
    assert code == 0 and len(warned) == 1, out
    assert "no commit between: the machine or the environment" in warned[0]
    assert not [line for line in out if line.startswith(("HOST LEVEL REGRESSION", "REGRESSION"))]


@pytest.mark.slow
def test_runs_with_too_few_cases_for_a_level_are_judged_raw_and_say_so(tmp_path, capsys):
    """(d) A history whose runs hold two series: no level, every case judged raw (a 10% step of one case
    on a quiet host is still found), and the output says so; a history where some runs are small says
    how many of them were judged raw."""
    db = history(tmp_path / "two.duckdb", np.ones(RUNS), {("full", "sdpa", 1024): 1.10}, series=SERIES[:2])
    code, out = check(db, capsys)
    assert "judged raw: no run has a level" in out[1] and "under 4 cases of 3 series" in out[1]
    assert code == 1 and len([line for line in out if line.startswith("REGRESSION")]) == 1
    db = history(tmp_path / "some.duckdb", busy_host(), small=(3, 9))
    code, out = check(db, capsys)
    assert code == 0 and "2 of 20 runs judged raw (under 4 cases of 3 series)" in out[1], out


@pytest.mark.slow
def test_where_the_level_adds_noise_the_cases_are_judged_raw_and_it_says_why(tmp_path, capsys):
    """A quiet host (no shift common to the cases, each case's own 1% noise): the other series' median
    would add its own noise, so `--against auto` judges raw and says why; `--against level` forces it."""
    db = history(tmp_path / "h.duckdb", np.ones(RUNS))
    code, out = check(db, capsys)
    assert code == 0 and out[1].startswith("judged raw (the level would add more noise than it takes away"), out
    code, out = check(db, capsys, "--against", "level")
    assert code == 0 and out[1].startswith("each case judged against its run's level"), out
    code, out = check(db, capsys, "--against", "raw")
    assert out[1].startswith("judged raw (--against raw")


def test_a_series_lengths_together_move_with_the_series_not_with_one_case():
    """suite.history.series.together: in each run, the median over a series' lengths of each one's
    deviation from its own median. One case's slow nights leave it; the series' step is its size; a
    series of two lengths (a median one case moves) is not judged together."""
    from suite.history.series import together

    rows = []
    for run in range(10):
        for n, base in ((256, 1.0), (512, 2.0), (1024, 4.0)):
            slow = 1.5 if (n == 512 and run >= 8) else 1.0
            step = 1.2 if run >= 5 else 1.0
            rows.append(
                {
                    "case_id": f"a{n}",
                    "series_key": "a",
                    "series": "a",
                    "run": run,
                    "git_commit": f"c{run}",
                    "value": base * slow * step,
                }
            )
        for n in (256, 512):
            rows.append(
                {
                    "case_id": f"b{n}",
                    "series_key": "b",
                    "series": "b",
                    "run": run,
                    "git_commit": f"c{run}",
                    "value": 1.0 + 0.5 * (run >= 8),
                }
            )
    out = together(pd.DataFrame(rows)).sort_values("run")
    assert set(out["series_key"]) == {"a"}
    assert np.allclose(out["value"].to_numpy() / out["value"].iloc[0], [1.0] * 5 + [1.2] * 5)


def test_a_series_lengths_together_are_its_newest_lengths_in_the_runs_that_hold_them_all():
    """A grid that changed its lengths, or a run where one length failed, is no step of the series."""
    from suite.history.series import together

    rows = []
    for run in range(30):
        cases = ("a256", "a512", "a1024") if run < 20 else ("d256", "d512", "d1024")
        for case in cases:
            if run == 25 and case == "d512":
                continue  # a failed case: that run is left out
            value = (0.8 if 10 <= run < 20 else 1.0) * (1.3 if run == 25 else 1.0)
            rows.append(
                {"case_id": case, "series_key": "a", "series": "a", "run": run, "git_commit": f"c{run}", "value": value}
            )
    out = together(pd.DataFrame(rows))
    assert list(out["run"]) == [20, 21, 22, 23, 24, 26, 27, 28, 29] and np.allclose(out["value"], 1.0)
    assert together(pd.DataFrame(rows).query("run < 3 and case_id != 'a512'")).empty  # two lengths: not judged
