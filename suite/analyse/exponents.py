"""Exponents of every series in every swept axis, the verdict table, and why a fit is not as claimed.

Pure functions on the long-form results table (after `prepare`, which parses `params` once).
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pandas as pd

from suite.analyse import memory, step_bytes, terms
from suite.analyse.claim_rule import Reason, Why
from suite.analyse.fits import MIN_POINTS, MIN_SPAN, TOLERANCE, fit_power, verdict
from suite.plan.case import series_key
from suite.store.row import NUMERIC_COLUMNS

SHAPE = [
    "variant",
    "impl",
    "device",
    "dtype",
    "mode",
    "batch",
    "seq_len",
    "kv_len",
    "valid_fraction",
    "num_heads",
    "num_kv_heads",
    "head_dim",
    "causal",
    "params",
]
# Axes fitted on every point: a flat series there is an implementation's work, not a per-call overhead (a dense
# key-padding mask costs B·n² at any valid fraction); docs/CLAIMS.md, "Padding"
NO_FLOOR = ("valid_tokens",)
# an axis that is not a field of the case: the field it stands for (valid tokens follow the valid fraction)
DERIVED = {"valid_tokens": "valid_fraction"}
# metric name -> column of the results table; time: each case's fastest call, the one least disturbed by
# the rest of the machine (contention only ever adds time; docs/regression.md, "Noise"); time_s, the median, is the
# figure shown
# the verdict of a time fit in a length: "cost", the series' cost model (suite.analyse.cost); "power", the
# power law's interval against claimed ± 0.15 (the rule before it, kept in `power_verdict`; docs/CLAIMS.md)
RULE = "cost"
# what the verdict table shows of a series' memory fit beside its time verdict, each as memory_<name>
MEMORY_SHOWN = ("claimed", "verdict", "why", "reason", "terms")
METRICS = {
    "time": "time_min_s",
    "memory": "peak_bytes",
    "flops": "flops_counted",
    "error": "approx_error",
    "work": "flops",
}  # work: the algorithm's FLOPs (theory), where the counter cannot count


# ------------------------------------------------------------------------------ the table's shape
def prepare(frame: pd.DataFrame) -> pd.DataFrame:
    """The results table with its JSON params parsed (once: `param_values`), `features`, and a
    readable `series` label. A frame that is already prepared is returned as it is."""
    if "param_values" in frame:
        return frame
    out = frame.copy()
    params = out["params"].map(lambda s: json.loads(s) if isinstance(s, str) and s else {})
    out["param_values"] = params
    out["features"] = params.map(lambda p: p.get("features"))
    out["series"] = [
        _series(impl, p, causal, mode) for impl, p, causal, mode in zip(out["impl"], params, out["causal"], out["mode"])
    ]
    if "approx_error" not in out:
        out["approx_error"] = np.nan
    for column in ("kv_len", "valid_fraction", "valid_tokens", "claimed_exponent_q", "claimed_exponent_k"):
        if column not in out:  # a table of earlier versions, or built in memory: no cross case, no padding
            out[column] = np.nan
    for column in {"kv_len", "valid_fraction", *NUMERIC_COLUMNS} & set(out.columns):
        out[column] = pd.to_numeric(out[column])  # NB: None in a table with no such case: NaN, as in one with
    out = memory.with_claims(out)  # NB: a table of earlier versions has none: its variants' declared claims
    if "time_min_s" not in out and "time_s" in out:  # a table built in memory by an older caller: the median stands in
        out["time_min_s"] = out["time_s"]
    return out


def _series(impl: str, params: dict, causal: bool, mode: str) -> str:
    extra = [f"{k}={v}" for k, v in sorted(params.items())]
    if causal:
        extra.append("causal")
    if mode != "fwd":
        extra.append(mode)
    return impl + (f" ({', '.join(extra)})" if extra else "")


def claimed_exponent(axis: str, metric: str, row: pd.Series) -> float | None:
    """What the claims say the exponent of `metric` in `axis` is, for the series of `row`."""
    if metric == "memory":  # one call's extra memory in n (docs/CLAIMS.md, "Memory: what a call keeps")
        return memory.claimed(row) if axis == "seq_len" else None
    if metric == "work":
        return None  # the theory itself
    if metric == "error":
        return -0.5 if axis == "features" else None  # performer: error about 1/√m
    if axis == "seq_len" and _crossed(row):  # n_q grows, n_k held: cross attention
        return _claim(row["claimed_exponent_q"])
    if axis == "seq_len":
        return float(row["claimed_exponent_n"])
    if axis == "kv_len":
        return _claim(row["claimed_exponent_k"])
    if axis == "valid_tokens":  # lengths scale together: the valid pairs grow as (valid tokens)^p
        return float(row["claimed_exponent_n"])
    if axis == "head_dim":
        value = row["claimed_exponent_d"]
        return None if value is None or pd.isna(value) else float(value)
    if axis == "num_heads":
        return 1.0
    if axis == "num_kv_heads":
        return 1.0 if row["mode"] == "decode" else None  # decode is bound by KV traffic
    if axis == "features":
        return 1.0  # FLOPs 4·B·H·n·m·d
    return None


def _column(fits: pd.DataFrame, name: str) -> pd.Series:
    return fits[name] if name in fits else pd.Series(np.nan, index=fits.index)


def _claim(value) -> float | None:
    return None if value is None or pd.isna(value) else float(value)


def _crossed(row: pd.Series) -> bool:
    """Cross attention: the keys are another sequence's, of length kv_len."""
    return not pd.isna(row.get("kv_len", np.nan))


def _cross_label(axis: str, row: pd.Series) -> str:
    """What a cross or padded series holds fixed, for its label: n_k in a fit in n_q, n_q in a fit in
    n_k, the padded n in a fit in valid tokens, the valid fraction in a fit in n."""
    if axis == "kv_len":
        return f" [n_q={int(row['seq_len'])}]"
    if axis == "valid_tokens":
        return f" [B={int(row['batch'])}, n={int(row['seq_len'])}]"
    if not pd.isna(row.get("valid_fraction", np.nan)):
        return f" [valid={row['valid_fraction']:g}]"
    return f" [n_k={int(row['kv_len'])}]" if _crossed(row) else ""


def exponents(
    frame: pd.DataFrame, axis: str = "seq_len", metrics=("time", "memory", "flops", "work"), hosts: dict | None = None
) -> pd.DataFrame:
    """One row per series (every shape field held fixed but `axis`) and metric with ≥ 3 values of `axis`.

    Columns: the fixed fields, `axis`, `metric`, `slope`, `lo`, `hi`, `claimed`, `verdict`, `why`,
    `points`, `used_min`, `used_max`, `span`, `excluded`, `floor`. A time fit in a length with a
    claim takes its verdict from the series' cost model (suite.analyse.cost, with the cache steps of
    `hosts`: suite.analyse.terms.machines), and keeps the power law's in `power_verdict`; its slope is
    the time exponent over the fitted range.
    """
    data = prepare(frame)
    ok = data[data["status"] == "ok"]
    fixed = [c for c in SHAPE if c not in (axis, DERIVED.get(axis)) and not (axis == "features" and c == "params")]
    if axis == "features":
        ok = ok[ok["features"].notna()]
        fixed = fixed + ["param_rest"]
        rest = ok["param_values"].map(lambda p: {k: v for k, v in p.items() if k != "features"})
        ok = ok.assign(param_rest=rest.map(lambda p: json.dumps(p, sort_keys=True)))
        ok["series"] = [_series(i, p, c, m) for i, p, c, m in zip(ok["impl"], rest, ok["causal"], ok["mode"])]
    if axis == "num_heads":  # KV heads follow the query heads (MHA) or stay fixed (MQA): hold the ratio
        fixed = [c for c in fixed if c != "num_kv_heads"] + ["kv_ratio"]
        ok = ok.assign(kv_ratio=ok["num_heads"] / ok["num_kv_heads"])
    if axis in ("kv_len", "valid_tokens"):
        ok = ok[ok[axis].notna()]
    # NB: the groups too short to fit are dropped before the loop: along heads or head dims most rows are a
    # group of their own, and iterating them was most of a report's time in those axes
    ok = ok[ok.groupby(fixed, sort=False, dropna=False)[axis].transform("nunique") >= MIN_POINTS]
    records = []
    for keys, group in ok.groupby(fixed, sort=False, dropna=False):
        first = group.iloc[0]
        label = first["series"] + _cross_label(axis, first)
        mine = len(records)
        for metric in metrics:
            col = METRICS[metric]
            values = group[[axis, col]].dropna()
            values = values[values[col] > 0]
            if values[axis].nunique() < MIN_POINTS:
                continue
            series = values.groupby(axis)[col].median()  # one point per x
            records.append(
                {
                    **dict(zip(fixed, keys if isinstance(keys, tuple) else (keys,))),
                    "series": label,
                    "axis": axis,
                    "metric": metric,
                    "impl_work": first.get("impl_work"),
                    "impl_library": first.get("impl_library"),
                    **_fitted(series, group, axis, metric, hosts),
                }
            )
        slopes = {r["metric"]: r["slope"] for r in records[mine:]}
        for record in records[mine:]:  # the same series' work exponents, beside its time exponent
            record["flops_slope"] = slopes.get("flops", np.nan)
            record["work_slope"] = slopes.get("work", np.nan)
            record["countable"] = bool(group["flops_counted"].notna().any())
            if "power_verdict" in record and record["metric"] == "time":  # counted FLOPs say nothing of memory
                _by_work(record)
                step_bytes.refute(record)
    return pd.DataFrame.from_records([_structured(record) for record in records])


def _structured(record: dict) -> dict:
    """A record's reason as plain values (suite.analyse.claim_rule): its code, what would tell, its notes' codes."""
    why = record.pop("_why")
    return {
        **record,
        "reason": why.reason.value,
        "tells": why.tells.value,
        "why_notes": ",".join(note.value for note, _ in why.notes),
    }


def _fitted(series: pd.Series, group: pd.DataFrame, axis: str, metric: str, hosts: dict | None) -> dict:
    """One series' fit in `axis` of `metric`: the power law's exponent and, for a claimed time in a
    length, the cost model's verdict (the power law's kept as `power_verdict`)."""
    claimed = claimed_exponent(axis, metric, group.iloc[0])
    if axis == "valid_tokens" and claimed is not None:
        fit, claimed = _against_work(series, group, axis)
    else:  # NB: a claim of a constant cost (a decode step over a window) is a claim about the floor itself
        fit = fit_power(
            series.index.to_numpy(float),
            series.to_numpy(float),
            exclude_floor=metric in ("time", "memory") and axis not in NO_FLOOR and claimed != 0,
        )
    status, why = verdict(fit, claimed)
    extra = {}
    if RULE == "cost" and metric == "time" and axis in terms.AXES and claimed is not None and not pd.isna(claimed):
        result = terms.judge_series(series, group, axis, claimed, hosts)
        extra = {"power_verdict": status, "power_why": str(why), **terms.columns(result, claimed)}
        status, why = result.verdict, result.reason
        extra.update(step_bytes.columns(series, group, hosts) if step_bytes.applies(group, axis, metric) else {})
    elif metric == "memory" and claimed is not None:
        result = memory.judge_series(series, claimed)
        extra = {"power_verdict": status, "power_why": str(why), **terms.columns(result, claimed, of="peak")}
        status, why = result.verdict, result.reason
    return {
        "slope": fit.slope if fit else np.nan,
        "lo": fit.lo if fit else np.nan,
        "hi": fit.hi if fit else np.nan,
        "intercept": fit.intercept if fit else np.nan,
        "claimed": claimed,
        "verdict": status,
        "why": str(why),
        "_why": why,
        "points": len(series),
        "used_min": min(fit.used) if fit else np.nan,
        "used_max": max(fit.used) if fit else np.nan,
        "span": fit.span if fit else np.nan,
        "excluded": list(fit.excluded) if fit else [],
        "floor": fit.floor if fit else np.nan,
        **extra,
    }


def _by_work(record: dict) -> None:
    """An implementation whose counted FLOPs grow faster than its claim does more work than the
    algorithm (a sparse pattern through a dense mask): its claim is refuted whatever its time's
    model says over a short span (docs/CLAIMS.md, "Verdicts")."""
    counted, claimed = record["flops_slope"], record["claimed"]
    if record["verdict"] != "refuted" and not pd.isna(counted) and counted > claimed + TOLERANCE:
        record["verdict"] = "refuted"
        n = "n_k" if record["axis"] == "kv_len" else "n"
        record["_why"] = Why(Reason.BY_WORK, {"n": n, "counted": _p(counted), "claimed": claimed}, record["_why"])
        record["why"] = str(record["_why"])


def _against_work(series: pd.Series, group: pd.DataFrame, axis: str):
    """A fit in valid tokens measured against the algorithm's own FLOPs at those lengths (Σ P(l_b)),
    whose exponent is p of the claim in n only where every l_b is past the pattern's constant (a
    window's w). The claim c: the formula's slope in valid tokens over the points. Fitted: y against
    that work, every point (NO_FLOOR), exponent b (1: the cost follows the formula, whatever its
    curve); returned in valid tokens, b·c with its interval, and c (docs/CLAIMS.md, "Padding")."""
    work = group[[axis, METRICS["work"]]].dropna().groupby(axis)[METRICS["work"]].median()
    x = series.index.intersection(work.index)
    shape = fit_power(x.to_numpy(float), work[x].to_numpy(float), exclude_floor=False)
    fit = fit_power(work[x].to_numpy(float), series[x].to_numpy(float), exclude_floor=False)
    if shape is None or fit is None:
        return fit, float("nan")
    c = round(shape.slope, 2)
    return dataclasses.replace(
        fit, slope=fit.slope * c, lo=fit.lo * c, hi=fit.hi * c, used=tuple(map(float, x)), excluded=()
    ), c


def all_exponents(frame: pd.DataFrame, hosts: dict | None = None) -> pd.DataFrame:
    """Exponents in every swept axis: n (time, memory, FLOPs), heads, head dim, KV heads, features.

    Each time fit carries `flops_slope` (the same series' counted-FLOP exponent, where counted) and
    a `diagnosis` of why it differs from its claim, where it does.
    """
    frame = prepare(frame)
    parts = [
        exponents(frame, "seq_len", hosts=hosts),
        exponents(frame, "kv_len", hosts=hosts),
        exponents(frame, "valid_tokens"),
        exponents(frame, "num_heads", ("time", "flops")),
        exponents(frame, "head_dim", ("time", "flops")),
        exponents(frame, "num_kv_heads", ("time",)),
        exponents(frame, "features", ("time", "error")),
    ]
    parts = [p for p in parts if not p.empty]
    if not parts:
        return pd.DataFrame()
    fits = pd.concat(parts, ignore_index=True)
    # NB: every column, even where no fit has it: a fit in an axis lacks that axis' field (and with no other
    # fit, so would the table), a run with no claimed time in a length lacks the cost model's columns
    for column in (*SHAPE, *terms.COLUMNS, *step_bytes.COLUMNS):
        if column not in fits:
            fits[column] = np.nan
    fits["diagnosis"] = [diagnose(row) if row["metric"] == "time" else "" for _, row in fits.iterrows()]
    return fits


def with_ladders(fits: pd.DataFrame, ladders: list[dict]) -> pd.DataFrame:
    """`lengths` on each time/memory fit in n of a series with adaptive lengths: where its ladder
    stopped and why, with what would settle it (ladders.json's records, suite.run.climb)."""
    if fits.empty:
        return fits
    out = fits.copy()
    out["lengths"] = ""
    if not ladders:
        return out
    stops = {record["series"]: f"{record['stop']}: {record['why']}" for record in ladders}
    in_n = out["axis"] == "seq_len"
    out.loc[in_n, "lengths"] = [stops.get(series_key(row), "") for _, row in out[in_n].iterrows()]
    return out


# ------------------------------------------------------------------------------ verdict table
def claims(fits: pd.DataFrame) -> pd.DataFrame:
    """The verdict table: per variant, device and dtype, each forward, non-causal time fit in n.

    `realizes` marks the implementation whose fit confirms the claim; for a sub-quadratic claim an
    implementation measured as quadratic (slope ≥ 1.85) is said not to realize it.
    """
    if fits.empty:
        return fits
    time_n = fits[
        (fits["axis"] == "seq_len")
        & (fits["metric"] == "time")
        & _column(fits, "kv_len").isna()
        & _column(fits, "valid_fraction").isna()
    ]
    rows = time_n[(time_n["mode"] == "fwd") & (~time_n["causal"].astype(bool))].copy()
    peaks = fits[(fits["axis"] == "seq_len") & (fits["metric"] == "memory")]
    join = [c for c in SHAPE if c != "seq_len"]
    shown = {"slope": "memory_slope", **{name: f"memory_{name}" for name in MEMORY_SHOWN}}
    peaks = peaks.assign(**{name: _column(peaks, name) for name in MEMORY_SHOWN})
    rows = rows.merge(peaks[join + list(shown)].rename(columns=shown), on=join, how="left")
    rows["realizes"] = np.select(
        [rows["verdict"] == "confirmed", (rows["claimed"] < 2) & (rows["slope"] >= 1.85)],
        ["yes", "no: measured quadratic"],
        default="",
    )
    return rows.sort_values(["variant", "device", "dtype", "impl", "series"]).reset_index(drop=True)


def cross(fits: pd.DataFrame) -> pd.DataFrame:
    """Cross attention's verdicts: each forward time fit in n_q (n_k held) and in n_k (n_q held)."""
    if fits.empty:
        return fits
    crossed = (fits["axis"] == "kv_len") | ((fits["axis"] == "seq_len") & _column(fits, "kv_len").notna())
    rows = fits[crossed & (fits["metric"] == "time") & (fits["mode"] == "fwd")].copy()
    rows["length"] = np.where(rows["axis"] == "kv_len", "n_k", "n_q")
    return rows.sort_values(["variant", "device", "dtype", "impl", "length", "series"]).reset_index(drop=True)


def decode(fits: pd.DataFrame) -> pd.DataFrame:
    """Decode steps' verdicts: each time fit in the cache's length n (one query, the last position)."""
    if fits.empty:
        return fits
    rows = fits[(fits["axis"] == "seq_len") & (fits["metric"] == "time") & (fits["mode"] == "decode")].copy()
    rows["length"] = "n"
    return rows.sort_values(["variant", "device", "dtype", "impl", "series"]).reset_index(drop=True)


def padding(fits: pd.DataFrame) -> pd.DataFrame:
    """Padded batches' verdicts: each time fit in valid tokens (the padded n held), and whether the
    implementation computes the padding, read off its counted FLOPs where they can be counted; and
    fits in n at a fixed valid fraction."""
    if fits.empty:
        return fits
    padded = (fits["axis"] == "valid_tokens") | ((fits["axis"] == "seq_len") & _column(fits, "valid_fraction").notna())
    rows = fits[padded & (fits["metric"] == "time")].copy()
    rows["length"] = np.where(rows["axis"] == "valid_tokens", "valid tokens", "n")
    rows["pays"] = [_pays(row) if row["axis"] == "valid_tokens" else "" for _, row in rows.iterrows()]
    return rows.sort_values(["variant", "device", "dtype", "impl", "length", "series"]).reset_index(drop=True)


def _p(exponent: float) -> str:
    """An exponent to 2 decimals, never "-0.00" (a flat cost's slope is a hair under 0 half the time)."""
    return f"{round(exponent, 2) + 0.0:.2f}"


def _pays(row: pd.Series) -> str:
    counted = row.get("flops_slope", np.nan)
    if pd.isna(counted):  # a kernel the counter cannot trace (flex, nested): time alone says it
        if row["hi"] < TOLERANCE:
            return f"yes, by its time (tokens^{row['slope']:.2f}; FLOPs not countable)"
        if row["lo"] > TOLERANCE:
            return f"not all of it: its time grows as tokens^{row['slope']:.2f} (FLOPs not countable)"
        return "unclear: FLOPs not countable, time neither flat nor growing"
    if counted < row["claimed"] - TOLERANCE:
        return f"yes: its counted FLOPs grow as tokens^{_p(counted)}, it computes the padding"
    return f"no: its counted FLOPs grow as tokens^{_p(counted)}"


def diagnose(row: pd.Series) -> str:
    """Why a time exponent differs from its claim, from the other fits of the same series."""
    if row["verdict"] in ("confirmed", "no claim") or pd.isna(row["slope"]):
        return ""
    axis = {
        "seq_len": "n_q" if _crossed(row) else "n",
        "kv_len": "n_k",
        "valid_tokens": "valid tokens",
        "num_heads": "H",
        "head_dim": "d",
        "num_kv_heads": "H_kv",
        "features": "m",
    }.get(row.get("axis", "seq_len"), "n")
    notes = []
    flops_slope, source = row.get("flops_slope"), "counted FLOPs"
    uncounted = flops_slope is None or pd.isna(flops_slope)
    library = row.get("impl_library")
    library = library if isinstance(library, str) else None
    if uncounted and library and not row.get("countable", True):
        # a library kernel the counter cannot trace (flex): its own work is unknown, say only what time says
        notes.append(
            f"its own work cannot be counted (FlopCounterMode cannot trace {row.get('impl')}); time grows "
            f"as {axis}^{row['slope']:.2f}" + (", as if it computed every pair" if row["slope"] >= 1.85 else "")
        )
        flops_slope = None
    elif (
        uncounted and not library and row.get("impl_work") == "algorithm" and not pd.isna(row.get("work_slope", np.nan))
    ):
        flops_slope, source = row["work_slope"], "the algorithm's FLOPs; the counter cannot count this path"
    if flops_slope is not None and not pd.isna(flops_slope):
        if abs(flops_slope - row["claimed"]) <= TOLERANCE:
            rate = flops_slope - row["slope"]
            notes.append(
                f"the work ({source}) grows as {axis}^{_p(flops_slope)}, as claimed, but the rate "
                + (
                    f"of work rises as {axis}^{rate:.2f} over the span (per-call overheads amortizing)"
                    if rate > 0
                    else f"of work falls as {axis}^{-rate:.2f} (the working set leaving the caches, or "
                    "scattered memory access)"
                )
            )
        elif source == "counted FLOPs" and not (abs(row.get("work_slope", np.nan) - flops_slope) <= TOLERANCE):
            notes.append(
                f"this implementation's work (counted FLOPs) grows as {axis}^{_p(flops_slope)}, "
                f"not as the algorithm's {axis}^{row['claimed']:g}"
            )
        else:
            notes.append(
                f"the algorithm's own FLOPs grow as {axis}^{_p(flops_slope)} over this span, not yet as "
                f"the asymptotic {axis}^{row['claimed']:g}: a wider span, to larger {axis}, would tell"
            )
    if row["excluded"]:
        notes.append(f"{axis} ≤ {max(row['excluded']):g} left out under the overhead floor")
    if not pd.isna(row["span"]) and row["span"] < MIN_SPAN:
        notes.append(f"span {row['span']:.0f}x is too narrow")
    return "; ".join(notes)
