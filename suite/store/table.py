"""Journal rows -> the long-form results table (one row per planned case), Parquet and CSV."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pandas as pd

from suite.plan.case import Case

COLUMNS = [
    "variant", "impl", "device", "dtype", "mode", "batch", "seq_len", "num_heads", "num_kv_heads",
    "head_dim", "causal", "params", "status", "reason", "time_s", "time_iqr_s", "samples", "flops",
    "flops_counted", "peak_bytes", "setup_s",
    # beside the required columns:
    "case_id", "pairs", "claimed_exponent_n", "claimed_exponent_d", "kv_bytes", "check_error",
    "check_tol", "flops_counted_note", "setup", "notes", "extra_flops", "wall_s", "replicates",
    "replicate_times_s", "approx_error", "approx_seq_len",
]
JSON_COLUMNS = ("params", "setup", "notes", "extra_flops")


def aggregate(rows: list[dict]) -> dict[str, dict]:
    """One row per case from its replicate rows (one per worker process).

    time_s is the median of the per-process medians; samples holds every process's samples and
    replicate_times_s the per-process medians, so between-process spread stays visible. A case
    any replicate of which failed takes that failure's status and reason.
    """
    per_case: dict[str, dict[int, dict]] = {}
    for row in rows:
        per_case.setdefault(row["case_id"], {})[int(row.get("replicate", 0))] = row
    out = {}
    for case_id, reps in per_case.items():
        base = dict(reps.get(0) or reps[min(reps)])
        failed = [(r, row) for r, row in sorted(reps.items()) if row["status"] != "ok"]
        if failed:
            r, row = failed[0]
            base.update(status=row["status"], reason=(f"replicate {r}: " if r else "") + row["reason"])
        elif base.get("samples"):
            medians = [statistics.median(row["samples"]) for _, row in sorted(reps.items())]
            samples = [t for _, row in sorted(reps.items()) for t in row["samples"]]
            quartiles = statistics.quantiles(samples, n=4) if len(samples) > 1 else [samples[0]] * 3
            base.update(time_s=statistics.median(medians), time_iqr_s=quartiles[2] - quartiles[0],
                        samples=samples, replicate_times_s=medians, replicates=len(medians))
        out[case_id] = base
    return out


def statuses(rows: list[dict]) -> dict[str, str]:
    return {case_id: row["status"] for case_id, row in aggregate(rows).items()}


def table(cases: list[Case], rows: list[dict]) -> pd.DataFrame:
    """Every planned case, in plan order, with its row; cases without one are `not_run`."""
    by_id = aggregate(rows)
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
    for col in ("samples", "replicate_times_s"):
        flat[col] = flat[col].map(lambda v: json.dumps(list(v)) if v is not None else None)
    flat.to_csv(csv, index=False)
    return [parquet, csv]


def read(run_dir: Path) -> pd.DataFrame:
    return pd.read_parquet(Path(run_dir) / "results.parquet")


def read_json(run_dir: Path, name: str) -> dict:
    """A run's plan.json, env.json or probe.json (the matmul peaks); {} where the run has none."""
    path = Path(run_dir) / name
    return json.loads(path.read_text()) if path.is_file() else {}
