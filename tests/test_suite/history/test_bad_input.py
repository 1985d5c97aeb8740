"""The history's commands on bad input: exit 2 with the field, the value and what is allowed, before any
work and without writing anything; two first adds at once; a run whose values the database refuses."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import types
from pathlib import Path

import pytest

pytest.importorskip("duckdb", reason='the `history` extra: pip install -e ".[history]"')
pytest.importorskip("asv", reason='the `history` extra: pip install -e ".[history]"')

from history_runs import commit_of, run_folder, synthetic_run  # noqa: E402

from suite import cli  # noqa: E402
from suite.errors import UsageError  # noqa: E402
from suite.history import backfill, store  # noqa: E402
from suite.store import table  # noqa: E402
from suite.store.rundir import RunDir  # noqa: E402

TIME = "2026-11-27T04:00:00+00:00"


@pytest.fixture(scope="module")
def ten_runs(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("db") / "h.duckdb"
    for i in range(10):  # changes.MIN_POINTS and more: a history check judges
        store.add(path, synthetic_run(i))
    return path


@pytest.fixture
def db(ten_runs, tmp_path) -> Path:
    """A copy of the ten runs' database for each test, which may damage it (built once)."""
    return Path(shutil.copy(ten_runs, tmp_path / "h.duckdb"))


def tidy(capsys) -> tuple[str, str]:
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return out, err


@pytest.mark.parametrize("target", ["folder", "missing/v.md", "file/v.md", ""])
def test_check_refuses_an_output_it_cannot_write_before_judging(db, tmp_path, capsys, target):
    (tmp_path / "folder").mkdir()
    (tmp_path / "file").write_text("x")
    assert cli.main(["history", "check", "--db", str(db), "--markdown", str(tmp_path / target) if target else ""]) == 2
    out, err = tidy(capsys)
    assert "--markdown" in err and "allowed: a file in a folder this user can write" in err
    assert "history check" not in out  # nothing judged


def test_check_refuses_a_step_summary_it_cannot_write(db, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path))
    assert cli.main(["history", "check", "--db", str(db)]) == 2
    err = tidy(capsys)[1]
    assert "$GITHUB_STEP_SUMMARY" in err and "is a folder" in err
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path / "summary.md"))
    assert cli.main(["history", "check", "--db", str(db)]) == 0
    assert "history check" in (tmp_path / "summary.md").read_text()


@pytest.mark.parametrize("target", ["folder", "file/x.html", ""])
def test_report_refuses_an_output_it_cannot_write(db, tmp_path, capsys, target):
    (tmp_path / "folder").mkdir()
    (tmp_path / "file").write_text("x")
    assert cli.main(["history", "report", "--db", str(db), "-o", str(tmp_path / target) if target else ""]) == 2
    out, err = tidy(capsys)
    assert "--output" in err and "history report" not in out
    assert cli.main(["history", "report", "--db", str(db), "-o", str(tmp_path / "new" / "page.html")]) == 0


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_outputs_in_a_folder_this_user_cannot_write_are_refused(db, tmp_path, capsys):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        assert cli.main(["history", "check", "--db", str(db), "--markdown", str(locked / "v.md")]) == 2
        assert "cannot be written by this user" in tidy(capsys)[1]
        locked.chmod(0o700)
        (locked / "summary.md").write_text("")
        locked.chmod(0o500)  # a summary is appended to: a writable file in a closed folder will do
        os.environ["GITHUB_STEP_SUMMARY"] = str(locked / "summary.md")
        assert (
            cli.main(["history", "check", "--db", str(db)]) == 0
            and "history check" in (locked / "summary.md").read_text()
        )
    finally:
        os.environ.pop("GITHUB_STEP_SUMMARY", None)
        locked.chmod(0o700)


def test_a_database_without_a_column_of_its_schema_is_named(db, capsys):
    import duckdb

    con = duckdb.connect(str(db))
    con.execute("ALTER TABLE cases DROP COLUMN time_min_s")
    con.close()
    for action in ("check", "report"):
        assert cli.main(["history", action, "--db", str(db)]) == 2
        err = tidy(capsys)[1]
        assert "table cases lacks time_min_s" in err and str(db) in err


def test_two_first_adds_at_once_keep_both_runs(tmp_path, monkeypatch):
    """The second add to find no database builds its own; the first one's lands before it: the second's
    run goes into the first's file, which is not replaced."""
    path = tmp_path / "h.duckdb"
    real = store._create

    def beaten(where, run):
        real(where, synthetic_run(0))  # the other process, a moment earlier
        return real(where, run)

    monkeypatch.setattr(store, "_create", beaten)
    assert store.add(path, synthetic_run(1))
    assert sorted(store.read(path)[0]["run_name"]) == ["nightly-0", "nightly-1"]
    assert [p.name for p in tmp_path.iterdir()] == ["h.duckdb"]  # no work folder left


def test_a_write_ahead_log_without_its_database_is_refused(tmp_path, capsys):
    results, path = tmp_path / "results", tmp_path / "h.duckdb"
    run_folder(results, "r1", commit_of(1))
    (tmp_path / "h.duckdb.wal").write_bytes(b"an older database's log")
    assert (
        cli.main(["history", "add", "r1", "--results-dir", str(results), "--db", str(path), "--commit-time", TIME]) == 2
    )
    assert "write-ahead log" in tidy(capsys)[1] and not path.exists()


@pytest.mark.parametrize("new", [True, False])
def test_a_run_whose_values_do_not_fit_is_named_not_the_database(tmp_path, new):
    path = tmp_path / "h.duckdb"
    if not new:
        store.add(path, synthetic_run(0))
    run = synthetic_run(1)
    huge = types.SimpleNamespace(**{**run.__dict__, "cases": run.cases.assign(batch=2**40)})
    with pytest.raises(UsageError, match="run nightly-1: its points cannot be stored") as err:
        store.add(path, huge)
    assert "damaged or foreign" not in str(err.value)
    assert path.exists() != new and (new or len(store.read(path)[0]) == 1)


def test_add_checks_the_runs_identity_before_it_writes_in_its_folder(tmp_path, capsys):
    results, path = tmp_path / "results", tmp_path / "h.duckdb"
    folder = run_folder(results, "dirty", commit_of(1) + "-dirty")
    for name in (RunDir.PARQUET, RunDir.CSV):
        (folder / name).unlink()
    assert (
        cli.main(["history", "add", "dirty", "--results-dir", str(results), "--db", str(path), "--commit-time", TIME])
        == 2
    )
    assert "git_commit" in tidy(capsys)[1]
    assert not (folder / RunDir.PARQUET).exists() and not path.exists()


@pytest.mark.parametrize(
    "extra, field",
    [
        (["--repo", "nosuch"], "--repo"),
        (["--commit-time", "now"], "--commit-time"),
        (["--commit-time", "5/6/2026"], "--commit-time"),
    ],
)
def test_add_names_a_bad_repository_or_time(tmp_path, capsys, extra, field):
    results = tmp_path / "results"
    run_folder(results, "r1", commit_of(1))
    assert (
        cli.main(["history", "add", "r1", "--results-dir", str(results), "--db", str(tmp_path / "h.duckdb"), *extra])
        == 2
    )
    assert field in tidy(capsys)[1] and not (tmp_path / "h.duckdb").exists()


def test_a_journal_cut_after_its_table_does_not_replace_the_table(tmp_path, capsys):
    folder = run_folder(tmp_path / "results", "r1", commit_of(1))
    journal = folder / RunDir.JOURNAL
    journal.write_text("")
    os.utime(journal, ns=(journal.stat().st_mtime_ns + 10**9,) * 2)
    run = RunDir.resolve(str(folder), tmp_path / "results")
    assert (run.read_table()["status"] == "ok").sum() == 8
    assert "journal holds 0 measured cases and its table 8: the table is kept" in capsys.readouterr().err


def with_status(folder: Path, status: str, n: int = 1) -> Path:
    """The run in `folder` with its first `n` cases ended as `status` (journal and table), as a run stopped
    from outside holds them."""
    run = RunDir(folder)
    rows = [
        dataclasses.replace(row, status=status, reason=f"worker {status}") if i < n else row
        for i, row in enumerate(run.journal.read().rows)
    ]
    run.file(RunDir.JOURNAL).write_text("")
    for row in rows:
        run.journal.append(row)
    run.write_table(table.table(run.cases(), rows))
    return folder


@pytest.mark.parametrize("status", ["killed", "not_run"])
def test_add_refuses_a_run_with_a_case_to_measure_again(tmp_path, capsys, status):
    """`run --resume` measures `killed` and `not_run` cases again: the run is not finished, and its
    killed case would fail the check as a regression."""
    results, path = tmp_path / "results", tmp_path / "h.duckdb"
    with_status(run_folder(results, "r1", commit_of(1)), status, n=2)
    assert (
        cli.main(["history", "add", "r1", "--results-dir", str(results), "--db", str(path), "--commit-time", TIME]) == 2
    )
    err = tidy(capsys)[1]
    assert f"the run is not finished: 2 of 8 cases {status}" in err and "python -m suite run --resume r1" in err
    assert "allowed: every case one of ok, skipped, invalid, oom, timeout, error" in err and not path.exists()
    assert not backfill._finished(results / "r1")


def test_add_takes_a_run_whose_cases_all_ended(tmp_path):
    results, path = tmp_path / "results", tmp_path / "h.duckdb"
    with_status(run_folder(results, "r1", commit_of(1)), "oom", n=2)
    assert (
        cli.main(["history", "add", "r1", "--results-dir", str(results), "--db", str(path), "--commit-time", TIME]) == 0
    )
    assert backfill._finished(results / "r1")


@pytest.mark.parametrize(
    "value", [float("nan"), float("inf"), -float("inf"), 1e300, 10**400, -5, 4102444800, "2026-01-01", True, [1.8e9]]
)
def test_add_names_a_journal_time_that_is_no_time(tmp_path, capsys, value):
    """finished_at, as the journal's JSON can hold it: a finite number of seconds since 1970 before 2100."""
    results, path = tmp_path / "results", tmp_path / "h.duckdb"
    run = RunDir(run_folder(results, "r1", commit_of(1)))
    lines = run.file(RunDir.JOURNAL).read_text().splitlines()
    lines[2] = json.dumps({**json.loads(lines[2]), "finished_at": value})
    run.file(RunDir.JOURNAL).write_text("\n".join(lines) + "\n")
    run.write_table(run.read_table())  # the table holds the journal as it is now: not rebuilt from it
    assert (
        cli.main(["history", "add", "r1", "--results-dir", str(results), "--db", str(path), "--commit-time", TIME]) == 2
    )
    err = tidy(capsys)[1]
    assert f"{run.file(RunDir.JOURNAL)} line 3 finished_at = {str(value)[:40]}" in err.replace("'", "")
    assert "allowed: a finite time in seconds since 1970, before 2100" in err and not path.exists()


# ------------------------------------------------------------------ backfill
def args_for(tmp_path: Path, **kw) -> list[str]:
    from test_history import git_repo

    repo = tmp_path / "repo"
    if not repo.exists():
        git_repo(repo, 3)
    given = {
        "--grid": "smoke",
        "--repo": str(repo),
        "--db": str(tmp_path / "h.duckdb"),
        "--results-dir": str(tmp_path / "results"),
        **kw,
    }
    return ["history", "backfill", "HEAD~2..HEAD", *[x for pair in given.items() for x in pair]]


@pytest.mark.parametrize(
    "kw, field",
    [
        ({"--grid": "nosuch"}, "--grid"),
        ({"--repo": "nosuch"}, "--repo"),
        ({"--db": "{tmp}/text"}, "cannot be used"),
        ({"--db": "{tmp}/file/h.duckdb"}, "--db"),
        ({"--paths": "/etc"}, "--paths"),
    ],
)
def test_backfill_refuses_bad_arguments_before_measuring_anything(tmp_path, capsys, monkeypatch, kw, field):
    (tmp_path / "text").write_text("not a database")
    (tmp_path / "file").write_text("x")
    measured = []
    monkeypatch.setattr(backfill, "measure", lambda commit, *a: measured.append(commit))
    assert cli.main(args_for(tmp_path, **{k: v.format(tmp=tmp_path) for k, v in kw.items()})) == 2
    assert field in tidy(capsys)[1]
    assert not measured and not (tmp_path / "results" / backfill.ORDERS).exists()


def test_backfill_does_not_take_a_finished_folder_of_another_commit(tmp_path):
    results = tmp_path / "results"
    run_folder(results, "backfill-x-synthetic", commit_of(1))
    args = types.SimpleNamespace(grid="synthetic", repo=str(tmp_path), device=None, variant=None)
    with pytest.raises(UsageError, match=f"holds a finished run of commit {commit_of(1)[:12]}, not of"):
        backfill.measure(commit_of(2), args, results, "backfill-x-synthetic")
    assert backfill.measure(commit_of(1), args, results, "backfill-x-synthetic") == results / "backfill-x-synthetic"
    assert json.loads((results / "backfill-x-synthetic" / RunDir.ENV).read_text())["git_commit"] == commit_of(1)


# ------------------------------------------------------------------ a path that broke
def failed_at(run, n: int):
    """`run` with linear/native at length n failed (no time), as a broken commit's run holds it."""
    hit = (run.cases["seq_len"] == n) & run.cases["series"].str.startswith("linear/native")
    cases = run.cases.copy()
    cases.loc[hit, ["status", "reason"]] = ["failed", "RuntimeError: boom"]
    cases.loc[hit, [c for c in cases.columns if c.startswith("time_")]] = float("nan")
    return types.SimpleNamespace(**{**run.__dict__, "cases": cases})


def test_a_case_that_fails_in_the_newest_run_fails_the_check(tmp_path, capsys):
    """A series' points are the runs that measured it: a path that now fails leaves no point to judge,
    and `check` said "no change". A case that failed in an older run and runs now is no failure."""
    path = tmp_path / "h.duckdb"
    for i in range(9):
        store.add(path, failed_at(synthetic_run(i), 512) if i == 3 else synthetic_run(i))
    store.add(path, failed_at(synthetic_run(9), 1024))
    assert cli.main(["history", "check", "--db", str(path)]) == 1
    out = tidy(capsys)[0]
    assert "n=1024: failed in the newest run (RuntimeError: boom); ok in 9 earlier runs" in out
    assert out.count("FAILED") == 1  # n = 512 failed in the fourth run only
    store.add(path, synthetic_run(10))
    assert cli.main(["history", "check", "--db", str(path)]) == 0
    assert "FAILED" not in tidy(capsys)[0]


# ------------------------------------------------------------------ the database's own SQL
def planted(db: Path, statement: str, drop: str | None = "cases") -> None:
    """`db` with `statement` run in it (after `drop`'s table is dropped), as a hostile file would hold."""
    import duckdb

    con = duckdb.connect(str(db))
    if drop:
        con.execute(f"DROP TABLE {drop}")
    con.execute(statement)
    con.close()


def test_a_view_in_place_of_a_table_reads_no_file(db, tmp_path, capsys):
    """A `cases` view whose newest run's reasons come from a local file: refused before any read."""
    secret = tmp_path / "secret.csv"
    secret.write_text("reason\nSECRET-LINE\n")
    newest = "c.run_key = (SELECT max(run_key) FROM kept)"
    planted(db, "ALTER TABLE cases RENAME TO kept", drop=None)
    planted(
        db,
        f"CREATE VIEW cases AS SELECT c.* REPLACE (CASE WHEN {newest} THEN 'error' ELSE c.status END "
        f"AS status, CASE WHEN {newest} THEN s.reason ELSE c.reason END AS reason) "
        f"FROM kept c, read_csv('{secret}') s",
        drop=None,
    )
    for argv in (["check"], ["report", "-o", str(tmp_path / "page.html")]):
        assert cli.main(["history", *argv, "--db", str(db)]) == 2
        out, err = tidy(capsys)
        assert "SECRET" not in out + err and not (tmp_path / "page.html").exists()
        assert str(db) in err and "table cases is a VIEW (allowed: a BASE TABLE" in err
    with pytest.raises(UsageError, match="table cases is a VIEW"):
        store.read(db)


@pytest.mark.parametrize(
    "statement, said",
    [
        ("CREATE VIEW leak AS SELECT 1", "view leak (allowed: none"),
        ("CREATE SCHEMA other; CREATE VIEW other.leak AS SELECT 1", "view other.leak (allowed: none"),
        ("CREATE MACRO leak(x) AS x", "macro leak (allowed: none"),
        ("DROP TABLE meta; CREATE VIEW meta AS SELECT 'schema' AS key, '1' AS value", "table meta is a VIEW"),
        (
            "DROP TABLE exponents",
            "no table exponents (allowed: a BASE TABLE of schema 1's columns: run_key VARCHAR NOT",
        ),
        (
            "ALTER TABLE cases ALTER time_s TYPE VARCHAR",
            "table cases column time_s is VARCHAR (allowed: DOUBLE, schema",
        ),
        ("ALTER TABLE cases ALTER status SET NOT NULL", "column status is VARCHAR NOT NULL (allowed: VARCHAR,"),
        ("ALTER TABLE cases ALTER time_s SET DEFAULT 1", "column time_s is DOUBLE DEFAULT "),
        ("ALTER TABLE runs ADD COLUMN extra INTEGER", "table runs has column extra INTEGER (allowed: only schema 1's"),
    ],
)
def test_a_database_whose_catalog_differs_is_named_before_any_read(db, statement, said):
    planted(db, statement, drop=None)
    with pytest.raises(UsageError, match="history database .*") as err:
        store.read(db)
    assert said in str(err.value) and str(db) in str(err.value)


@pytest.mark.parametrize(
    "table, column, value, allowed",
    [
        ("cases", "time_min_s", "'inf'::DOUBLE", "a time over 0 s"),
        ("cases", "time_min_s", "0", "a time over 0 s"),
        ("cases", "time_s", "-1", "a time over 0 s"),
        ("cases", "time_iqr_s", "1e300", "a spread from 0 s"),
        ("exponents", "slope", "'-inf'::DOUBLE", "a finite number"),
        ("exponents", "slope", "1e308", "a finite number"),
    ],
)
def test_a_number_out_of_range_is_named_not_judged(db, capsys, table, column, value, allowed):
    """An infinite or huge time or exponent kept the change-point search looping until memory ran out."""
    planted(db, f"UPDATE {table} SET {column} = {value} WHERE run_key = 'run00003'", drop=None)
    with pytest.raises(UsageError, match=f"table {table} column {column} = .* in run run00003 \\(allowed: {allowed}"):
        store.read(db)
