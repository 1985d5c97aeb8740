"""What a history keeps of one run: a row per case and a row per series' fitted time exponent in n.

Pure: the run's results table in, two tables out (no files, no database). A case row holds the
median time, the 95% interval of that median from the case's own calls (distribution-free: scipy's
quantile test; blank under 6 calls), the fastest call, the spread, the sample count and the status;
an exponent row holds the fit of suite.analyse (the report's), its interval, its claim and verdict.
Both carry `series_key`: the case's shape without n (suite.plan.case.series_key), which joins a
case's time to its series' exponent across runs.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from suite.analyse.exponents import all_exponents, prepare
from suite.plan.case import series_key

SHAPE = [
    "variant",
    "impl",
    "device",
    "dtype",
    "mode",
    "batch",
    "num_heads",
    "num_kv_heads",
    "head_dim",
    "causal",
    "params",
    "kv_len",
    "valid_fraction",
]
CASE_COLUMNS = [
    "case_id",
    "series_key",
    "series",
    "label",
    *SHAPE,
    "seq_len",
    "status",
    "reason",
    "time_s",
    "time_lo_s",
    "time_hi_s",
    "time_min_s",
    "time_iqr_s",
    "samples_n",
    "replicates",
]
EXPONENT_COLUMNS = [
    "series_key",
    "series",
    *SHAPE,
    "slope",
    "lo",
    "hi",
    "claimed",
    "verdict",
    "points",
    "used_min",
    "used_max",
]
LEVEL = 0.95


def median_interval(samples) -> tuple[float, float]:
    """The 95% interval of the median of `samples` (order statistics; NaN, NaN under 6 samples)."""
    from scipy import stats

    values = np.asarray(samples if samples is not None else [], float)
    if len(values) < 6:
        return float("nan"), float("nan")
    ci = stats.quantile_test(values, q=float(np.median(values)), p=0.5).confidence_interval(LEVEL)
    return float(ci.low), float(ci.high)


def _label(row: pd.Series) -> str:
    kv = f"/{int(row['num_kv_heads'])}" if row["num_kv_heads"] != row["num_heads"] else ""
    return (
        f"{row['variant']}/{row['series']} {row['device']} {row['dtype']} B={int(row['batch'])} "
        f"H={int(row['num_heads'])}{kv} d={int(row['head_dim'])}"
    )


def _keyed(rows: pd.DataFrame) -> pd.DataFrame:
    """`series_key` and the readable `series` ("variant/implementation (params) device dtype B H d")."""
    out = rows.copy()
    for column in ("kv_len", "valid_fraction"):
        if column not in out:
            out[column] = np.nan
    out["series_key"] = [series_key(row) for _, row in out.iterrows()]
    out["series"] = [_label(row) for _, row in out.iterrows()]
    return out


def case_points(frame: pd.DataFrame) -> pd.DataFrame:
    """One row per case of the run (every status: a case that stopped working is history too)."""
    data = _keyed(prepare(frame))
    intervals = [
        median_interval(s) if status == "ok" else (np.nan, np.nan) for s, status in zip(data["samples"], data["status"])
    ]
    data["time_lo_s"] = [lo for lo, _ in intervals]
    data["time_hi_s"] = [hi for _, hi in intervals]
    data["samples_n"] = data["samples"].map(lambda s: 0 if s is None else len(s))
    data["label"] = data["series"] + " n=" + data["seq_len"].astype(int).astype(str)
    data["reason"] = data["reason"].fillna("")
    return data[CASE_COLUMNS].reset_index(drop=True)


def exponent_points(frame: pd.DataFrame, hosts: dict | None = None) -> pd.DataFrame:
    """One row per series with a time exponent in n (the report's fit: floor left out, 95% interval)
    and its verdict (the cost model's, with the cache steps of `hosts`: suite.analyse.terms.machines)."""
    fits = all_exponents(prepare(frame), hosts)
    if fits.empty:
        return pd.DataFrame(columns=EXPONENT_COLUMNS)
    fits = fits[(fits["axis"] == "seq_len") & (fits["metric"] == "time")]
    if fits.empty:
        return pd.DataFrame(columns=EXPONENT_COLUMNS)
    return _keyed(fits)[EXPONENT_COLUMNS].reset_index(drop=True)
