"""The history database: one DuckDB file (default results/history.duckdb) of many runs' points.

    meta       key, value: the schema's version
    runs       one row per run added: run_key, fingerprint_id, git_commit, commit_time, run_time, run_name,
               grid, added_at, env (env.json as text)
    cases      run_key, fingerprint_id, git_commit, commit_time, run_time + suite.history.points.CASE_COLUMNS
    exponents  the same keys + suite.history.points.EXPONENT_COLUMNS

A run is added in one transaction: its runs row, its cases and its exponents, all or none (a kill, a
full disk or an error half-way leaves the database as it was; DuckDB's write-ahead log replays only
committed transactions). A new database is made beside its path and linked into place once its first
run is in, so a failed first add leaves no file, and of two first adds at once neither replaces the other's
file (the second adds its run to the first's). Adding a run already there adds nothing. A database
holds one machine's fingerprint unless told otherwise (`another_fingerprint`): runs of another machine
are not comparable points of one series. Any DuckDB error becomes a UsageError naming the file and
what to do (exit 2).

A database is data, never code: DuckDB is opened with external access off (no other file, no
extension, the settings locked), and before any table is read its catalog is checked: meta, runs,
cases and exponents are base tables whose columns and types are this version's DDL's, and the file
holds no view or macro. Reads name their columns, and their numbers are checked to be in range
(_check_numbers). A file that differs is refused (UsageError naming the table, the column, what was
found and what is allowed).
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from suite.errors import UsageError
from suite.history.points import CASE_COLUMNS, EXPONENT_COLUMNS
from suite.store import atomic

SCHEMA = "1"
KEYS = ["run_key", "fingerprint_id", "git_commit", "commit_time", "run_time"]
TYPES = {
    "case_id": "VARCHAR",
    "series_key": "VARCHAR",
    "series": "VARCHAR",
    "label": "VARCHAR",
    "variant": "VARCHAR",
    "impl": "VARCHAR",
    "device": "VARCHAR",
    "dtype": "VARCHAR",
    "mode": "VARCHAR",
    "batch": "INTEGER",
    "num_heads": "INTEGER",
    "num_kv_heads": "INTEGER",
    "head_dim": "INTEGER",
    "causal": "BOOLEAN",
    "params": "VARCHAR",
    "kv_len": "DOUBLE",
    "valid_fraction": "DOUBLE",
    "seq_len": "INTEGER",
    "status": "VARCHAR",
    "reason": "VARCHAR",
    "samples_n": "INTEGER",
    "replicates": "INTEGER",
    "verdict": "VARCHAR",
    "points": "INTEGER",
    "run_key": "VARCHAR",
    "fingerprint_id": "VARCHAR",
    "git_commit": "VARCHAR",
    "commit_time": "TIMESTAMPTZ",
    "run_time": "TIMESTAMPTZ",
}
RUN_COLUMNS = [*KEYS, "run_name", "grid", "added_at", "env"]
# DuckDB's settings for every connection: no file but the database's, no extension, settings locked
CONFIG = {
    "enable_external_access": False,
    "autoload_known_extensions": False,
    "autoinstall_known_extensions": False,
    "lock_configuration": True,
}
TABLES = {"runs": RUN_COLUMNS, "cases": [*KEYS, *CASE_COLUMNS], "exponents": [*KEYS, *EXPONENT_COLUMNS]}


@dataclass(frozen=True)
class Run:
    """One run's identity and its points, ready to add (suite.history.runs makes it from a folder)."""

    run_key: str
    fingerprint_id: str
    git_commit: str
    commit_time: pd.Timestamp
    run_time: pd.Timestamp
    run_name: str
    grid: str
    env: str  # env.json's text
    cases: pd.DataFrame  # suite.history.points.case_points
    exponents: pd.DataFrame  # suite.history.points.exponent_points


def _table(name: str, columns: list[str], key: list[str]) -> str:
    cols = ", ".join(
        f"{c} {TYPES.get(c, 'DOUBLE')} NOT NULL" if c in KEYS else f"{c} {TYPES.get(c, 'DOUBLE')}" for c in columns
    )
    return f"CREATE TABLE {name} ({cols}, PRIMARY KEY ({', '.join(key)}))"


DDL = [
    "CREATE TABLE meta (key VARCHAR PRIMARY KEY, value VARCHAR)",
    "CREATE TABLE runs (run_key VARCHAR PRIMARY KEY, fingerprint_id VARCHAR NOT NULL, git_commit VARCHAR NOT NULL, "
    "commit_time TIMESTAMPTZ NOT NULL, run_time TIMESTAMPTZ NOT NULL, run_name VARCHAR NOT NULL, grid VARCHAR, "
    "added_at TIMESTAMPTZ NOT NULL, env VARCHAR)",
    _table("cases", TABLES["cases"], ["run_key", "case_id"]),
    _table("exponents", TABLES["exponents"], ["run_key", "series_key"]),
]


def _duckdb():
    try:
        import duckdb
    except ImportError:
        raise UsageError('the history needs DuckDB: pip install -c constraints.txt -e ".[history]"') from None
    return duckdb


def problem(path: Path, err: Exception) -> UsageError:
    """The error for a database that cannot be used: which file, what is wrong, what to do."""
    text = str(err).splitlines()[0] if str(err) else type(err).__name__
    if "lock" in text.lower():
        return UsageError(f"history database {path} is in use by another process ({text}): wait for it")
    return UsageError(
        f"history database {path} cannot be used: {text} (a damaged or foreign file: restore it "
        "from its copy, or move it and its .wal aside and rebuild it with `history add` / "
        "`history backfill`)"
    )


@contextmanager
def connected(path: Path, read_only: bool):
    """A connection to an existing history database, checked to be one; UsageError otherwise."""
    duckdb = _duckdb()
    path = Path(path)
    if path.is_dir():
        raise UsageError(f"--db {path} is a folder (allowed: a history database's file)")
    if not path.is_file():
        raise UsageError(
            f"--db {path}: no history database there (make one: python -m suite history add RUN --db {path})"
        )
    try:
        con = _connect(path, read_only)
    except duckdb.Error as err:
        raise problem(path, err) from None
    try:
        _check_schema(con, path)
        yield con
    except duckdb.Error as err:
        raise problem(path, err) from None
    finally:
        con.close()


def _connect(path: Path, read_only: bool = False):
    """A connection that reaches nothing outside its file: the file's SQL (a view's, a macro's) reads no
    other file, loads no extension and cannot turn that back on."""
    return _duckdb().connect(str(path), read_only=read_only, config=CONFIG)


FIX = "a damaged or foreign file: restore it from its copy, or rebuild it with `history backfill`"


def _check_schema(con, path: Path) -> None:
    """The file holds this version's tables, as base tables with their columns and types, and no view or
    macro a read could run; checked in the catalog, before any table is read. UsageError naming the
    table, the column, what was found and what is allowed."""
    views, tables = _catalog(con)
    if "meta" not in tables and "meta" not in views:
        raise UsageError(
            f"history database {path}: a DuckDB database without the history's tables (not a "
            "history database: give another --db)"
        )
    for name in ("meta", *TABLES):
        if name in views:
            raise UsageError(
                f"history database {path}: table {name} is a VIEW (allowed: a BASE TABLE; a view's "
                f"SQL would run on every read; {FIX})"
            )
    if views:
        name, kind = min(views.items())
        raise UsageError(
            f"history database {path}: {kind} {name} (allowed: none: a history database holds "
            f"tables only, and a view's or macro's SQL could run on a read; {FIX})"
        )
    _check_columns(path, "meta", tables)
    found = dict(con.execute("SELECT key, value FROM main.meta").fetchall())
    if found.get("schema") != SCHEMA:
        raise UsageError(
            f"history database {path}: schema {found.get('schema')!r} (allowed: {SCHEMA!r}, "
            "this version's; rebuild it with `history backfill`)"
        )
    for name in TABLES:
        _check_columns(path, name, tables)


def _catalog(con) -> tuple[dict[str, str], dict[str, dict[str, str]]]:
    """The file's views and macros ({name: kind}) and its tables' columns ({table: {column: declaration}}),
    read from DuckDB's catalog functions (which run none of the file's SQL)."""
    here = "database_name = current_database() AND NOT internal"
    found = con.execute(
        f"SELECT schema_name, view_name, 'view' FROM duckdb_views() WHERE {here} UNION "
        f"SELECT schema_name, function_name, 'macro' FROM duckdb_functions() WHERE {here}"
    ).fetchall()
    return {(name if schema == "main" else f"{schema}.{name}"): kind for schema, name, kind in found}, _columns(con)


def _columns(con) -> dict[str, dict[str, str]]:
    tables = {}
    for table, column, declared in con.execute(
        "SELECT table_name, column_name, data_type || CASE WHEN is_nullable THEN '' ELSE ' NOT NULL' END "
        "|| CASE WHEN column_default IS NULL THEN '' ELSE ' DEFAULT ' || column_default END "
        "|| CASE WHEN is_generated THEN ' GENERATED' ELSE '' END FROM duckdb_columns() "
        "WHERE database_name = current_database() AND schema_name = 'main' AND NOT internal "
        "ORDER BY table_name, column_index"
    ).fetchall():
        tables.setdefault(table, {})[column] = declared
    return tables


@functools.cache
def _expected() -> dict[str, dict[str, str]]:
    """Each table's columns as this version's DDL declares them (made in memory, read back from the catalog)."""
    con = _duckdb().connect(":memory:", config=CONFIG)
    try:
        for statement in DDL:
            con.execute(statement)
        return _columns(con)
    finally:
        con.close()


def _check_columns(path: Path, table: str, tables: dict[str, dict[str, str]]) -> None:
    want = _expected()[table]
    allowed = f"schema {SCHEMA}'s columns: {', '.join(f'{c} {d}' for c, d in want.items())}"
    if table not in tables:
        raise UsageError(f"history database {path}: no table {table} (allowed: a BASE TABLE of {allowed}; {FIX})")
    found = tables[table]
    for column, declared in want.items():
        if column not in found:
            raise UsageError(
                f"history database {path}: table {table} lacks {column} {declared} (allowed: schema "
                f"{SCHEMA}'s columns, this one among them; {FIX})"
            )
        if found[column] != declared:
            raise UsageError(
                f"history database {path}: table {table} column {column} is {found[column]} (allowed: "
                f"{declared}, schema {SCHEMA}'s; {FIX})"
            )
    extra = sorted(found.keys() - want.keys())
    if extra:
        raise UsageError(
            f"history database {path}: table {table} has column {extra[0]} {found[extra[0]]} (allowed: "
            f"only {allowed}; {FIX})"
        )


def read(path: Path) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """(runs, cases, exponents) of the whole database, in commit and run order; the known columns by name,
    their numbers checked to be in range (UsageError naming the table, the column and the value)."""
    order = "ORDER BY commit_time, run_time, run_key"
    with connected(path, read_only=True) as con:
        frames = tuple(
            con.execute(f"SELECT {', '.join(_quoted(c) for c in columns)} FROM main.{table} {order}").df()
            for table, columns in TABLES.items()
        )
    for table, frame in zip(TABLES, frames):
        _check_numbers(path, table, frame)
    return frames


POSITIVE = ("time_s", "time_lo_s", "time_hi_s", "time_min_s")  # times whose logarithm is taken
LONGEST = 1e6  # seconds: longer than any case's time
LARGEST = 1e12  # any other number's size (a length, an exponent)


def _check_numbers(path: Path, table: str, frame: pd.DataFrame) -> None:
    """Each DOUBLE column's values are missing (NULL, NaN) or in range (_in_range): an infinite, huge, zero
    or negative time sends the change-point search into a loop that does not end."""
    for column in (c for c, declared in _expected()[table].items() if declared.startswith("DOUBLE")):
        values = pd.to_numeric(frame[column], errors="coerce").to_numpy(float)
        ok, allowed = _in_range(column, values)
        bad = ~np.isnan(values) & ~ok
        if bad.any():
            raise UsageError(
                f"history database {path}: table {table} column {column} = {float(values[bad][0])!r} "
                f"in run {frame['run_key'].to_numpy()[bad][0]} (allowed: {allowed}, or missing; {FIX})"
            )


def _in_range(column: str, values: np.ndarray) -> tuple[np.ndarray, str]:
    with np.errstate(invalid="ignore"):
        if column in POSITIVE:
            return (values > 0) & (values <= LONGEST), f"a time over 0 s, up to {LONGEST:g} s"
        if column == "time_iqr_s":
            return (values >= 0) & (values <= LONGEST), f"a spread from 0 s up to {LONGEST:g} s"
        return np.abs(values) <= LARGEST, f"a finite number up to {LARGEST:g} in size"


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def add(path: Path, run: Run, another_fingerprint: bool = False) -> bool:
    """Add `run` in one transaction; False where it is there already (nothing added)."""
    path = Path(path)
    if not path.exists() and _create(path, run):
        return True
    with connected(path, read_only=False) as con:
        if con.execute("SELECT count(*) FROM runs WHERE run_key = ?", [run.run_key]).fetchone()[0]:
            return False
        prints = [r[0] for r in con.execute("SELECT DISTINCT fingerprint_id FROM runs").fetchall()]
        if prints and run.fingerprint_id not in prints and not another_fingerprint:
            raise UsageError(
                f"history add {run.run_name}: fingerprint {run.fingerprint_id} (allowed: {', '.join(prints)}, the "
                f"machine and settings of {path}): another machine's times are no point of these series (keep them "
                "in another --db, or add with --another-fingerprint and judge each with --fingerprint)"
            )
        _insert(con, run)
    return True


def _create(path: Path, run: Run) -> bool:
    """A new database with `run` in it, made beside `path` and linked into place when whole; False where
    another process made `path` first (the run is then added to that one, as to any)."""
    duckdb = _duckdb()
    wal = path.with_name(path.name + ".wal")
    if wal.exists():
        raise UsageError(
            f"--db {path}: its write-ahead log {wal} is there without it (allowed: a new database's "
            "path with no .wal beside it; move the log aside with the database it belongs to)"
        )
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    except OSError as err:
        raise UsageError(
            f"--db {path}: {err.strerror or err} (allowed: a path in a folder this user can write)"
        ) from None
    fresh = work / path.name
    try:
        con = _connect(fresh)
        try:
            con.begin()
            for statement in DDL:
                con.execute(statement)
            con.execute("INSERT INTO meta VALUES ('schema', ?)", [SCHEMA])
            con.commit()
            _insert(con, run)
            con.execute("CHECKPOINT")
        except duckdb.Error as err:
            raise problem(path, err) from None
        finally:
            con.close()
        try:
            os.link(fresh, path)  # NB: not os.replace: two first adds racing would each replace the other's file
        except FileExistsError:
            return False
        except OSError:  # a file system without hard links: renamed (where a racing first add may overwrite it)
            os.replace(fresh, path)
        atomic.sync_dir(path.parent)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return True


def _insert(con, run: Run) -> None:
    """The run's rows, in one transaction (rolled back on any error)."""
    keys = {
        "run_key": run.run_key,
        "fingerprint_id": run.fingerprint_id,
        "git_commit": run.git_commit,
        "commit_time": run.commit_time,
        "run_time": run.run_time,
    }
    con.begin()
    try:
        con.execute(
            f"INSERT INTO runs ({', '.join(RUN_COLUMNS)}) VALUES (?, ?, ?, ?, ?, ?, ?, now(), ?)",
            [*keys.values(), run.run_name, run.grid, run.env],
        )
        for name, frame in (("cases", run.cases), ("exponents", run.exponents)):
            rows = frame.assign(**keys)
            con.register("incoming", rows)
            con.execute(f"INSERT INTO {name} BY NAME SELECT * FROM incoming")
            con.unregister("incoming")
        con.commit()
    except BaseException as err:
        con.rollback()
        if isinstance(err, _duckdb().Error):  # the run's values, not the database: name the run
            text = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise UsageError(
                f"run {run.run_name}: its points cannot be stored ({text}; allowed: the types and "
                f"ranges of schema {SCHEMA}'s columns)"
            ) from None
        raise
