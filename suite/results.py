"""Journal rows -> the long-form results table (one row per planned case), Parquet and CSV."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from suite.case import Case

COLUMNS = [
    "variant", "impl", "device", "dtype", "mode", "batch", "seq_len", "num_heads", "num_kv_heads",
    "head_dim", "causal", "params", "status", "reason", "time_s", "time_iqr_s", "samples", "flops",
    "flops_counted", "peak_bytes", "setup_s",
    # beside the required columns:
    "case_id", "pairs", "claimed_exponent_n", "claimed_exponent_d", "kv_bytes", "check_error",
    "check_tol", "flops_counted_note", "setup", "notes", "extra_flops", "wall_s",
]
JSON_COLUMNS = ("params", "setup", "notes", "extra_flops")


def table(cases: list[Case], rows: list[dict]) -> pd.DataFrame:
    """Every planned case, in plan order, with its row; cases without one are `not_run`."""
    by_id = {row["case_id"]: row for row in rows}
    records = []
    for case in cases:
        row = by_id.get(case.case_id)
        if row is None:
            row = {"case_id": case.case_id, **case.key, "status": "not_run",
                   "reason": "the run stopped before this case; --resume runs it"}
        records.append({col: row.get(col) for col in COLUMNS})
    frame = pd.DataFrame.from_records(records, columns=COLUMNS)
    for col in JSON_COLUMNS:
        frame[col] = frame[col].map(lambda v: json.dumps(v, sort_keys=True) if v is not None else None)
    return frame


def write(frame: pd.DataFrame, run_dir: Path) -> list[Path]:
    parquet, csv = run_dir / "results.parquet", run_dir / "results.csv"
    frame.to_parquet(parquet, index=False)
    flat = frame.copy()
    flat["samples"] = flat["samples"].map(lambda v: json.dumps(list(v)) if v is not None else None)
    flat.to_csv(csv, index=False)
    return [parquet, csv]


def read(run_dir: Path) -> pd.DataFrame:
    return pd.read_parquet(Path(run_dir) / "results.parquet")
