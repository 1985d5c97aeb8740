"""History databases with random damage (tables missing, dropped or retyped columns, views and macros,
a view in place of a table, a wrong schema, NULLs, extreme values) into the history's readers: a clean
read or a UsageError (exit 2 naming the file), never a traceback, and never a local file's content."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytest.importorskip("duckdb", reason='the `history` extra: pip install -e ".[history]"')
pytest.importorskip("asv", reason='the `history` extra: pip install -e ".[history]"')

import duckdb  # noqa: E402
from history_runs import synthetic_run  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from suite import cli  # noqa: E402
from suite.errors import UsageError  # noqa: E402
from suite.history import store  # noqa: E402

SECRET = "SECRET-LINE-OUTSIDE-THE-DATABASE"
TABLES = ["meta", *store.TABLES]
COLUMNS = {"meta": ["key", "value"], **store.TABLES}
TYPES = ["VARCHAR", "DOUBLE", "INTEGER", "BIGINT", "BOOLEAN", "TIMESTAMPTZ", "DATE", "BLOB"]
VALUES = [
    "NULL",
    "'nan'::DOUBLE",
    "'inf'::DOUBLE",
    "'-inf'::DOUBLE",
    "-1",
    "0",
    "1e308",
    "2147483647",
    "''",
    "'x'",
    "repeat('é', 500)",
    "'1'",
    "'2'",
    "'NaN'",
    "'ok'",
    "'killed'",
    "'infinity'::TIMESTAMPTZ",
    "'-infinity'::TIMESTAMPTZ",
    "'1677-09-21'::TIMESTAMPTZ",
    "'9999-12-31'::TIMESTAMPTZ",
    "true",
]


def _quoted(name: str) -> str:
    return '"' + name + '"'


@st.composite
def damage(draw, secret: Path) -> list[str]:
    """One to three statements that damage a history database (each may fail on its own: then it is skipped)."""
    table = draw(st.sampled_from(TABLES))
    column = _quoted(draw(st.sampled_from(COLUMNS[table])))
    rows = draw(st.sampled_from(["", " WHERE rowid % 2 = 0", " WHERE rowid = 0", " WHERE rowid % 7 = 3"]))
    reads = f"read_csv('{secret}')"
    choices = [
        f"DROP TABLE {table}",
        f"ALTER TABLE {table} RENAME TO kept; CREATE VIEW {table} AS SELECT k.*, s.* FROM kept k, {reads} s",
        f"ALTER TABLE {table} RENAME TO kept; CREATE VIEW {table} AS SELECT * FROM kept",
        f"CREATE VIEW extra AS SELECT * FROM {reads}",
        "CREATE MACRO extra(x) AS x",
        f"CREATE MACRO extra() AS TABLE SELECT * FROM {reads}",
        f"ALTER TABLE {table} DROP COLUMN {column}",
        f"ALTER TABLE {table} ADD COLUMN extra {draw(st.sampled_from(TYPES))}",
        f"ALTER TABLE {table} ALTER {column} SET DATA TYPE {draw(st.sampled_from(TYPES))} "
        f"USING TRY_CAST({column} AS {draw(st.sampled_from(TYPES))})",
        f"ALTER TABLE {table} ALTER {column} DROP NOT NULL; UPDATE {table} SET {column} = NULL{rows}",
        f"UPDATE {table} SET {column} = {draw(st.sampled_from(VALUES))}{rows}",
        f"DELETE FROM {table}{rows}",
        f"UPDATE meta SET value = {draw(st.sampled_from(VALUES))}",
        "INSERT INTO meta VALUES ('other', 'x')",
    ]
    return draw(st.lists(st.sampled_from(choices), min_size=1, max_size=3))


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> Path:
    """Ten runs: enough for `check` to judge, so its whole path is reached (built once a module)."""
    path = tmp_path_factory.mktemp("db") / "h.duckdb"
    for i in range(10):
        store.add(path, synthetic_run(i))
    return path


def damaged(history: Path, tmp: Path, statements: list[str]) -> Path:
    path = Path(shutil.copy(history, tmp / "h.duckdb"))
    con = duckdb.connect(str(path))  # NB: the defaults, external access on: the damage is made as an attacker would
    for statement in statements:
        try:
            con.execute(statement)
        except duckdb.Error:
            pass  # e.g. a type the column's values do not convert to, or a view whose name is taken
    con.close()
    return path


def plant(tmp: Path) -> Path:
    secret = tmp / "secret.csv"
    secret.write_text(f"a,b\n{SECRET},1\n")
    return secret


FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _read_or_refuse(path: Path) -> None:
    try:
        frames = store.read(path)
    except UsageError as err:
        assert str(path) in str(err) and SECRET not in str(err)
        return
    assert all(SECRET not in frame.to_string() for frame in frames)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_the_reader_takes_any_damaged_database(history, tmp_path_factory, data):
    tmp = tmp_path_factory.mktemp("fuzz")
    _read_or_refuse(damaged(history, tmp, data.draw(damage(plant(tmp)))))


@pytest.mark.slow
@FUZZ
@given(st.data())
def test_check_and_report_take_any_damaged_database(history, tmp_path_factory, capsys, data):
    """The whole commands: `store.read`, then `history check` (0, 1 or 2) and, now and then, `history report`."""
    tmp = tmp_path_factory.mktemp("fuzz")
    path = damaged(history, tmp, data.draw(damage(plant(tmp))))
    _read_or_refuse(path)
    assert cli.main(["history", "check", "--db", str(path)]) in (0, 1, 2)
    if data.draw(st.integers(0, 3)) == 0:
        assert cli.main(["history", "report", "--db", str(path), "-o", str(tmp / "page.html")]) in (0, 2)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err and SECRET not in out + err
