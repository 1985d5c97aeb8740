"""Rows -> the long-form results table (one row per planned case), written as Parquet and CSV.

The columns are `suite.store.row.COLUMNS`: derived from Case and Row, never hand-kept. Tables
written by earlier versions load too: `read` adds the columns they lack (see `_upgrade`).
"""

from __future__ import annotations

import json
import numbers
from pathlib import Path

import pandas as pd

from suite.plan.case import KEY_KINDS, Case
from suite.store import atomic
from suite.store.row import COLUMNS, JSON_COLUMNS, NUMERIC_COLUMNS, STATUSES, Row, aggregate

LIST_COLUMNS = ("samples", "replicate_times_s")
JOURNAL_BYTES = "suite_journal_bytes"  # the table's metadata: the size of the journal it was built from


def by_case(rows: list[Row]) -> dict[str, Row]:
    """One aggregated Row per case id, from its process rows."""
    groups: dict[str, dict[int, Row]] = {}
    for row in rows:
        groups.setdefault(row.case_id, {})[row.replicate] = row  # a re-run replicate replaces the old
    return {case_id: aggregate(list(reps.values())) for case_id, reps in groups.items()}


def statuses(rows: list[Row]) -> dict[str, str]:
    return {case_id: row.status for case_id, row in by_case(rows).items()}


def record(row: Row) -> dict:
    """The table's columns of one aggregated row (every Row field but the per-process ones)."""
    data = row.to_json()
    return {col: data.get(col) for col in COLUMNS}  # NB: a case's key holds kv_len, valid_fraction only when set


def table(cases: list[Case], rows: list[Row]) -> pd.DataFrame:
    """Every planned case, in plan order, with its row; cases without one are `not_run`."""
    measured = by_case(rows)
    records = [
        record(
            measured.get(case.case_id)
            or Row.lost(case, "not_run", "the run stopped before this case; --resume runs it")
        )
        for case in cases
    ]
    frame = pd.DataFrame.from_records(records, columns=COLUMNS)
    for col in JSON_COLUMNS:
        frame[col] = frame[col].map(lambda v: json.dumps(v, sort_keys=True) if v is not None else None)
    return frame


def write(frame: pd.DataFrame, parquet: Path, csv: Path, journal_bytes: int = 0) -> list[Path]:
    """Both files, each written whole (the CSV first: a table whose Parquet is whole is whole). The
    Parquet file records how many bytes of the journal it holds (`journal_bytes`: read by `built_from`)."""
    flat = frame.copy()
    for col in LIST_COLUMNS:
        flat[col] = flat[col].map(lambda v: json.dumps(list(v)) if v is not None else None)
    with atomic.replacing(csv) as tmp:
        flat.to_csv(tmp, index=False)
    frame = frame.copy(deep=False)
    frame.attrs = {JOURNAL_BYTES: int(journal_bytes)}  # NB: pandas keeps attrs in the Parquet file's metadata
    with atomic.replacing(parquet) as tmp:
        frame.to_parquet(tmp, index=False)
    return [parquet, csv]


def read(parquet: Path) -> pd.DataFrame:
    """The table; ValueError naming the first column whose values are not of its kind."""
    frame = pd.read_parquet(parquet)
    frame.attrs.pop(JOURNAL_BYTES, None)
    return _check_kinds(_upgrade(frame))


NUMBERS = [
    *(name for name, kind in KEY_KINDS.items() if kind in (int, float)),
    *(name for name in NUMERIC_COLUMNS if name in COLUMNS),
]  # NB: not a process's own (pid)
TEXTS = ["case_id", *(name for name, kind in KEY_KINDS.items() if kind is str)]


def _check_kinds(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame`, or ValueError where a column holds what its kind does not allow (a table written by
    something else, or edited, must not reach the analysis with text where numbers go)."""
    for col in NUMBERS:
        values = frame[col]
        if not pd.api.types.is_numeric_dtype(values) or pd.api.types.is_bool_dtype(values):
            wrong = values.dropna().map(lambda v: not isinstance(v, numbers.Real) or isinstance(v, bool))
            if wrong.any():
                raise ValueError(f"column {col} holds {_plain(values.dropna()[wrong].iloc[0])!r} (allowed: numbers)")
    for col in TEXTS:
        wrong = frame[col].map(lambda v: not isinstance(v, str))
        if wrong.any():
            raise ValueError(f"column {col} holds {_plain(frame[col][wrong].iloc[0])!r} (allowed: text)")
    unknown = ~frame["status"].isin(STATUSES)
    if unknown.any():
        raise ValueError(f"column status holds {frame['status'][unknown].iloc[0]!r} (allowed: {', '.join(STATUSES)})")
    return frame


def _plain(value: object) -> object:
    """A NumPy scalar as Python's own (np.True_ is shown as True)."""
    return value.item() if hasattr(value, "item") else value


def built_from(parquet: Path) -> int | None:
    """The journal's size in bytes when the table was built from it; None for a table that does not say
    (written before this was recorded, or unreadable)."""
    import pyarrow.parquet as pq

    try:
        attrs = json.loads(pq.read_metadata(parquet).metadata[b"PANDAS_ATTRS"])
        return int(attrs[JOURNAL_BYTES])
    except Exception:  # NB: no metadata, no key, a cut file: the table does not say
        return None


def readable(parquet: Path) -> bool:
    """Whether the Parquet file's footer reads (a cut file's does not)."""
    import pyarrow.parquet as pq

    try:
        pq.read_metadata(parquet)
        return True
    except Exception:  # NB: pyarrow's ArrowInvalid, OSError: any of them means "rebuild it"
        return False


# NB: tables written before implementation traits were recorded (commit 7290207 and earlier) lack
# `impl_work` and `impl_library`; then only the built-in names said what an implementation was.
_LEGACY_LIBRARY = {
    "sdpa": "torch scaled_dot_product_attention",
    "flex": "torch FlexAttention",
    "xformers": "xformers memory_efficient_attention",
}


def _upgrade(frame: pd.DataFrame) -> pd.DataFrame:
    if "impl_work" not in frame:
        frame["impl_work"] = frame["impl"].map(lambda impl: "algorithm" if impl == "native" else None)
    if "impl_library" not in frame:
        frame["impl_library"] = frame["impl"].map(_LEGACY_LIBRARY.get)
    if "time_min_s" not in frame:  # tables written before the fastest call was a column: from the samples
        frame["time_min_s"] = frame["samples"].map(lambda v: float(min(v)) if v is not None and len(v) else None)
    for col in COLUMNS:
        if col not in frame:
            frame[col] = None
    return frame
