"""Fits, verdicts, crossovers and efficiency: pure functions on the long-form results table.

Knows nothing of files or figures. Each exponent is fitted as `log(cost) = a + p·log(x)` on the
points above the overhead floor (docs/CLAIMS.md, "Verdicts"): the floor is found by fitting
`cost = floor + c·xᵖ` and the small-x points where it makes up more than FLOOR_SHARE of the cost
are left out of the fit, and named.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

FLOOR_SHARE = 0.10  # a point whose modelled floor is more than this share of its cost is left out
TOLERANCE = 0.15  # docs/CLAIMS.md: confirmed when the 95% interval lies within claimed ± 0.15
MIN_SPAN = 16.0  # docs/CLAIMS.md: a verdict needs a span of x of at least 16x
MIN_POINTS = 3
LEVEL = 0.95

SHAPE = ["variant", "impl", "device", "dtype", "mode", "batch", "seq_len", "num_heads",
         "num_kv_heads", "head_dim", "causal", "params"]
# metric name -> column of the results table
METRICS = {"time": "time_s", "memory": "peak_bytes", "flops": "flops_counted", "error": "approx_error",
           "work": "flops"}  # work: the algorithm's FLOPs (theory), where the counter cannot count


@dataclass(frozen=True)
class Fit:
    """A power-law fit of y against x, with what was left out and why."""

    slope: float
    lo: float  # 95% interval of the slope
    hi: float
    intercept: float
    used: tuple[float, ...]  # the x of the points fitted
    excluded: tuple[float, ...] = ()  # the x of the points under the overhead floor
    floor: float = 0.0  # modelled constant floor, in y's unit

    @property
    def span(self) -> float:
        return max(self.used) / min(self.used) if self.used else 0.0


def floor_model(x, y, exponents=np.linspace(-1.0, 4.0, 1001)) -> tuple[float, float, float]:
    """(floor, c, p) minimizing the relative error of y ≈ floor + c·xᵖ, floor ≥ 0, c > 0.

    For each p on a grid the model is linear in (floor, c): the 2x2 normal equations are solved
    for every p at once, with the floor clamped to 0 where it comes out negative.
    """
    x, y = np.asarray(x, float), np.asarray(y, float)
    u = 1.0 / y  # (k,)  the floor's column, relative
    w = x[None, :] ** exponents[:, None] / y[None, :]  # (P, k)  the power term's column, relative
    suu, suw, sww = (u * u).sum(), (w * u).sum(1), (w * w).sum(1)
    su, sw = u.sum(), w.sum(1)
    det = suu * sww - suw**2
    with np.errstate(divide="ignore", invalid="ignore"):
        floor = np.where(det > 0, (su * sww - suw * sw) / det, 0.0)
        c = np.where(det > 0, (suu * sw - suw * su) / det, 0.0)
        only_c = sw / sww  # floor clamped to 0
    clamp = floor < 0
    floor, c = np.where(clamp, 0.0, floor), np.where(clamp, only_c, c)
    sse = ((1.0 - floor[:, None] * u[None, :] - c[:, None] * w) ** 2).sum(1)
    sse = np.where(c > 0, sse, np.inf)
    best = int(np.argmin(sse))
    return float(floor[best]), float(c[best]), float(exponents[best])


def fit_power(x, y, *, exclude_floor: bool = True, level: float = LEVEL) -> Fit | None:
    """Least squares in log-log on the points above the floor; None with fewer than 3 points."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    keep = np.isfinite(x) & np.isfinite(y) & (x > 0) & (y > 0)
    x, y = x[keep], y[keep]
    order = np.argsort(x)
    x, y = x[order], y[order]
    if len(np.unique(x)) < MIN_POINTS:
        return None
    floor, excluded = 0.0, np.zeros(len(x), bool)
    if exclude_floor and len(x) > MIN_POINTS:
        floor, c, p = floor_model(x, y)
        if floor > 0 and p > 0:
            share = floor / (floor + c * x**p)
            # only a leading run of small x: the floor's share falls as x grows
            excluded = np.cumprod(share > FLOOR_SHARE).astype(bool)
            if len(np.unique(x[~excluded])) < MIN_POINTS:  # keep the largest 3 at least
                excluded[-MIN_POINTS:] = False
    lx, ly = np.log(x[~excluded]), np.log(y[~excluded])
    res = stats.linregress(lx, ly)
    dof = len(lx) - 2
    half = stats.t.ppf(0.5 + level / 2, dof) * res.stderr if dof > 0 else math.inf
    if not np.isfinite(half):
        half = math.inf
    return Fit(slope=float(res.slope), lo=float(res.slope - half), hi=float(res.slope + half),
               intercept=float(res.intercept), used=tuple(map(float, x[~excluded])),
               excluded=tuple(map(float, x[excluded])), floor=floor)


def verdict(fit: Fit | None, claimed: float | None, *, tolerance: float = TOLERANCE,
            min_span: float = MIN_SPAN) -> tuple[str, str]:
    """(verdict, why) per docs/CLAIMS.md: the 95% interval against claimed ± tolerance."""
    if claimed is None or (isinstance(claimed, float) and math.isnan(claimed)):
        return "no claim", "nothing is claimed for this exponent"
    if fit is None:
        return "inconclusive", f"fewer than {MIN_POINTS} points measured"
    if fit.span < min_span:
        return "inconclusive", f"span {fit.span:.0f}x after the floor, {min_span:.0f}x needed"
    low, high = claimed - tolerance, claimed + tolerance
    if low <= fit.lo and fit.hi <= high:
        return "confirmed", f"[{fit.lo:.2f}, {fit.hi:.2f}] within {claimed:g} ± {tolerance:g}"
    if fit.hi < low or fit.lo > high:
        return "refuted", f"[{fit.lo:.2f}, {fit.hi:.2f}] wholly outside {claimed:g} ± {tolerance:g}"
    return "inconclusive", f"[{fit.lo:.2f}, {fit.hi:.2f}] overlaps the edge of {claimed:g} ± {tolerance:g}"


# ------------------------------------------------------------------------------ the table's shape
def prepare(frame: pd.DataFrame) -> pd.DataFrame:
    """The results table with its JSON params expanded: `features` and a readable `series` label."""
    out = frame.copy()
    params = out["params"].map(lambda s: json.loads(s) if isinstance(s, str) and s else {})
    out["features"] = params.map(lambda p: p.get("features"))
    out["series"] = [_series(impl, p, causal, mode)
                     for impl, p, causal, mode in zip(out["impl"], params, out["causal"], out["mode"])]
    if "approx_error" not in out:
        out["approx_error"] = np.nan
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
    if metric in ("memory", "work"):
        return None  # memory is measured and shown, never claimed (docs/CLAIMS.md); work is the theory itself
    if metric == "error":
        return -0.5 if axis == "features" else None  # performer: error about 1/√m
    if axis == "seq_len":
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


def exponents(frame: pd.DataFrame, axis: str = "seq_len", metrics=("time", "memory", "flops", "work")) -> pd.DataFrame:
    """One row per series (every shape field held fixed but `axis`) and metric with ≥ 3 values of `axis`.

    Columns: the fixed fields, `axis`, `metric`, `slope`, `lo`, `hi`, `claimed`, `verdict`, `why`,
    `points`, `used_min`, `used_max`, `span`, `excluded`, `floor`.
    """
    data = prepare(frame)
    ok = data[data["status"] == "ok"]
    fixed = [c for c in SHAPE if c != axis and not (axis == "features" and c == "params")]
    if axis == "features":
        ok = ok[ok["features"].notna()]
        fixed = fixed + ["param_rest"]
        ok = ok.assign(param_rest=ok["params"].map(_without_features))
        ok["series"] = [_series(i, json.loads(p), c, m) for i, p, c, m in
                        zip(ok["impl"], ok["param_rest"], ok["causal"], ok["mode"])]
    if axis == "num_heads":  # KV heads follow the query heads (MHA) or stay fixed (MQA): hold the ratio
        fixed = [c for c in fixed if c != "num_kv_heads"] + ["kv_ratio"]
        ok = ok.assign(kv_ratio=ok["num_heads"] / ok["num_kv_heads"])
    records = []
    for keys, group in ok.groupby(fixed, sort=False, dropna=False):
        if group[axis].nunique() < MIN_POINTS:
            continue
        first = group.iloc[0]
        mine = len(records)
        for metric in metrics:
            col = METRICS[metric]
            values = group[[axis, col]].dropna()
            values = values[values[col] > 0]
            if values[axis].nunique() < MIN_POINTS:
                continue
            series = values.groupby(axis)[col].median()  # one point per x
            fit = fit_power(series.index.to_numpy(float), series.to_numpy(float),
                            exclude_floor=metric in ("time", "memory"))
            claimed = claimed_exponent(axis, metric, first)
            status, why = verdict(fit, claimed)
            records.append({
                **dict(zip(fixed, keys if isinstance(keys, tuple) else (keys,))),
                "series": first["series"], "axis": axis, "metric": metric,
                "slope": fit.slope if fit else np.nan, "lo": fit.lo if fit else np.nan,
                "hi": fit.hi if fit else np.nan, "intercept": fit.intercept if fit else np.nan,
                "claimed": claimed, "verdict": status, "why": why, "points": len(series),
                "used_min": min(fit.used) if fit else np.nan, "used_max": max(fit.used) if fit else np.nan,
                "span": fit.span if fit else np.nan, "excluded": list(fit.excluded) if fit else [],
                "floor": fit.floor if fit else np.nan,
            })
        slopes = {r["metric"]: r["slope"] for r in records[mine:]}
        for record in records[mine:]:  # the same series' work exponents, beside its time exponent
            record["flops_slope"] = slopes.get("flops", np.nan)
            record["work_slope"] = slopes.get("work", np.nan)
            record["countable"] = bool(group["flops_counted"].notna().any())
    return pd.DataFrame.from_records(records)


def _without_features(text) -> str:
    params = json.loads(text) if isinstance(text, str) and text else {}
    params.pop("features", None)
    return json.dumps(params, sort_keys=True)


def all_exponents(frame: pd.DataFrame) -> pd.DataFrame:
    """Exponents in every swept axis: n (time, memory, FLOPs), heads, head dim, KV heads, features.

    Each time fit carries `flops_slope` (the same series' counted-FLOP exponent, where counted) and
    a `diagnosis` of why it differs from its claim, where it does.
    """
    parts = [exponents(frame, "seq_len"), exponents(frame, "num_heads", ("time", "flops")),
             exponents(frame, "head_dim", ("time", "flops")), exponents(frame, "num_kv_heads", ("time",)),
             exponents(frame, "features", ("time", "error"))]
    parts = [p for p in parts if not p.empty]
    if not parts:
        return pd.DataFrame()
    fits = pd.concat(parts, ignore_index=True)
    fits["diagnosis"] = [diagnose(row) if row["metric"] == "time" else "" for _, row in fits.iterrows()]
    return fits


# ------------------------------------------------------------------------------ verdict table
def claims(fits: pd.DataFrame) -> pd.DataFrame:
    """The verdict table: per variant, device and dtype, each forward, non-causal time fit in n.

    `realizes` marks the implementation whose fit confirms the claim; for a sub-quadratic claim an
    implementation measured as quadratic (slope ≥ 1.85) is said not to realize it.
    """
    if fits.empty:
        return fits
    time_n = fits[(fits["axis"] == "seq_len") & (fits["metric"] == "time")]
    rows = time_n[(time_n["mode"] == "fwd") & (~time_n["causal"].astype(bool))].copy()
    memory = fits[(fits["axis"] == "seq_len") & (fits["metric"] == "memory")]
    join = [c for c in SHAPE if c != "seq_len"]
    rows = rows.merge(memory[join + ["slope"]].rename(columns={"slope": "memory_slope"}), on=join, how="left")
    rows["realizes"] = np.select(
        [rows["verdict"] == "confirmed", (rows["claimed"] < 2) & (rows["slope"] >= 1.85)],
        ["yes", "no: measured quadratic"], default="")
    return rows.sort_values(["variant", "device", "dtype", "impl", "series"]).reset_index(drop=True)


def diagnose(row: pd.Series) -> str:
    """Why a time exponent differs from its claim, from the other fits of the same series."""
    if row["verdict"] in ("confirmed", "no claim") or pd.isna(row["slope"]):
        return ""
    axis = {"seq_len": "n", "num_heads": "H", "head_dim": "d", "num_kv_heads": "H_kv",
            "features": "m"}.get(row.get("axis", "seq_len"), "n")
    notes = []
    flops_slope, source = row.get("flops_slope"), "counted FLOPs"
    uncounted = flops_slope is None or pd.isna(flops_slope)
    if uncounted and row.get("impl") != "native" and not row.get("countable", True):
        # a library kernel the counter cannot trace (flex): its own work is unknown, say only what time says
        notes.append(f"its own work cannot be counted (FlopCounterMode cannot trace {row.get('impl')}); time grows "
                     f"as {axis}^{row['slope']:.2f}" + (", as if it computed every pair" if row["slope"] >= 1.85 else ""))
        flops_slope = None
    elif uncounted and row.get("impl") == "native" and not pd.isna(row.get("work_slope", np.nan)):
        flops_slope, source = row["work_slope"], "the algorithm's FLOPs; the counter cannot count this path"
    if flops_slope is not None and not pd.isna(flops_slope):
        if abs(flops_slope - row["claimed"]) <= TOLERANCE:
            rate = flops_slope - row["slope"]
            notes.append(f"the work ({source}) grows as {axis}^{flops_slope:.2f}, as claimed, but the rate "
                         + (f"of work rises as {axis}^{rate:.2f} over the span (per-call overheads amortizing)"
                            if rate > 0 else
                            f"of work falls as {axis}^{-rate:.2f} (the working set leaving the caches, or "
                            "scattered memory access)"))
        elif source == "counted FLOPs" and not (abs(row.get("work_slope", np.nan) - flops_slope) <= TOLERANCE):
            notes.append(f"this implementation's work (counted FLOPs) grows as {axis}^{flops_slope:.2f}, "
                         f"not as the algorithm's {axis}^{row['claimed']:g}")
        else:
            notes.append(f"the algorithm's own FLOPs grow as {axis}^{flops_slope:.2f} over this span, not yet as "
                         f"the asymptotic {axis}^{row['claimed']:g}: a wider span, to larger {axis}, would tell")
    if row["excluded"]:
        notes.append(f"{axis} ≤ {max(row['excluded']):g} left out under the overhead floor")
    if not pd.isna(row["span"]) and row["span"] < MIN_SPAN:
        notes.append(f"span {row['span']:.0f}x is too narrow")
    return "; ".join(notes)


# ------------------------------------------------------------------------------ crossover
def crossovers(frame: pd.DataFrame, references=("dense", "sdpa")) -> pd.DataFrame:
    """Per sub-quadratic series, the n above which it beats `full` (each reference implementation).

    From the measured times at the n both have, interpolated linearly in log(time ratio) against
    log(n) between the last two points where the sign changes; never extrapolated.
    """
    data = prepare(frame)
    ok = data[(data["status"] == "ok") & data["time_s"].notna()]
    same = ["device", "dtype", "mode", "batch", "num_heads", "head_dim", "causal"]
    full = ok[ok["variant"] == "full"]
    candidates = ok[(ok["variant"] != "full") & (ok["claimed_exponent_n"] < 2) & (ok["mode"] != "decode")]
    records = []
    for keys, group in candidates.groupby(["variant", "impl", "params"] + same, sort=False):
        info = dict(zip(["variant", "impl", "params"] + same, keys))
        for ref in references:
            base = full[(full["impl"] == ref)]
            for col in same:
                base = base[base[col] == info[col]]
            mine = group.groupby("seq_len")["time_s"].median()
            theirs = base.groupby("seq_len")["time_s"].median()
            common = mine.index.intersection(theirs.index)
            if len(common) < 2:
                continue
            ratio = np.log(mine[common].to_numpy() / theirs[common].to_numpy())  # < 0: faster
            n = common.to_numpy(float)
            records.append({**info, "series": group.iloc[0]["series"], "reference": f"full/{ref}",
                            **_crossing(n, ratio)})
    return pd.DataFrame.from_records(records)


def _crossing(n: np.ndarray, log_ratio: np.ndarray) -> dict:
    faster = log_ratio < 0
    span = f"n = {n[0]:g}–{n[-1]:g}"
    if faster.all():
        return {"crossover_n": np.nan, "crossover": f"faster at every measured n ({span})"}
    if not faster[-1]:
        return {"crossover_n": np.nan, "crossover": f"slower at every measured n up to {n[-1]:g}"
                if not faster.any() else f"slower again at n = {n[-1]:g}"}
    i = int(np.flatnonzero(~faster)[-1])  # last slower point; faster from i + 1 on
    a, b = np.log(n[i]), np.log(n[i + 1])
    t = log_ratio[i] / (log_ratio[i] - log_ratio[i + 1])
    cross = float(np.exp(a + t * (b - a)))
    return {"crossover_n": cross, "crossover": f"faster above n ≈ {cross:,.0f} (interpolated in {span})"}


# ------------------------------------------------------------------------------ efficiency
def efficiency(frame: pd.DataFrame, peaks: dict | None) -> pd.DataFrame:
    """Per ok case: useful FLOP/s (the algorithm's FLOPs over the time), its share of the device's
    measured matmul peak, and counted-vs-theory work."""
    data = prepare(frame)
    ok = data[(data["status"] == "ok") & data["time_s"].notna()].copy()
    ok["useful_flops_per_s"] = ok["flops"] / ok["time_s"]
    ok["work_ratio"] = ok["flops_counted"] / ok["flops"]  # > 1: the implementation does extra work
    peak = [_peak(peaks, device, dtype) for device, dtype in zip(ok["device"], ok["dtype"])]
    ok["peak_flops_per_s"] = peak
    # NB: the useful rate, not the counted one: FlopCounterMode counts causal SDPA as full attention
    ok["peak_share"] = ok["useful_flops_per_s"] / ok["peak_flops_per_s"]
    return ok


def _peak(peaks: dict | None, device: str, dtype: str) -> float:
    try:
        return float(peaks[device][dtype]["flops_per_s"])
    except (KeyError, TypeError):
        return np.nan


# ------------------------------------------------------------------------------ status
def status_matrix(frame: pd.DataFrame) -> pd.DataFrame:
    """Counts of each status per variant and implementation (rows) — what ran and what did not."""
    counts = frame.groupby(["variant", "impl", "status"]).size().unstack("status", fill_value=0)
    order = [s for s in ("ok", "skipped", "oom", "timeout", "error", "invalid", "not_run") if s in counts]
    return counts[order + [c for c in counts if c not in order]]


@dataclass
class Analysis:
    """Everything the report shows, computed once from the table (and the run's GEMM probe)."""

    frame: pd.DataFrame
    fits: pd.DataFrame
    claims: pd.DataFrame
    crossovers: pd.DataFrame
    efficiency: pd.DataFrame
    status: pd.DataFrame


def analyse(frame: pd.DataFrame, peaks: dict | None = None) -> Analysis:
    fits = all_exponents(frame)
    table = claims(fits)
    return Analysis(frame=prepare(frame), fits=fits, claims=table, crossovers=crossovers(frame),
                    efficiency=efficiency(frame, peaks), status=status_matrix(frame))
