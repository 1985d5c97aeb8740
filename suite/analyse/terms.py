"""The cost-model verdict of one series of the results table: its lengths, fastest calls, working
set handed to suite.analyse.cost, and the columns the fits table shows from it.

The machine of a device: on a CPU, env.json's `cpu_caches`, the bound on a step from bandwidth.json,
and its rate for random gathers (bandwidth.json's `gathers`) for an implementation whose leading term
is such gathers; a device without caches (a GPU, a run older than the cache record) is fitted
without cache steps.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pandas as pd

from suite.analyse import cost
from suite.analyse.claim_rule import Note
from suite.analyse.paths import Paths, declared
from suite.analyse.steps import gather_rate, machine

AXES = ("seq_len", "kv_len")  # the lengths a cost model is fitted in (the claim's n, n_q or n_k)
COLUMNS = (
    "power_verdict",
    "power_why",
    "terms",
    "need_p",
    "higher_p",
    "higher_term",
    "higher_share",
    "lead_share",
    "steps",
)


def machines(env: dict | None, bandwidth: dict | None = None) -> dict[str, dict]:
    """device -> {"caches": ..., "step_max": ...}, for the devices whose cache sizes the run recorded
    (env.json). A step's bound is the run's cache bandwidth over its memory bandwidth, less one
    (bandwidth.json: how much slower a purely memory-bound kernel gets out of the cache); none
    where the run has no bandwidth probe."""
    caches = (env or {}).get("cpu_caches") or {}
    if not isinstance(caches, dict) or not caches:
        return {}
    try:
        ratio = float(bandwidth["cpu"]["cache_bytes_per_s"]) / float(bandwidth["cpu"]["bytes_per_s"])
    except (KeyError, TypeError, ValueError, ZeroDivisionError):
        ratio = math.inf
    gathers = ((bandwidth or {}).get("cpu") or {}).get("gathers")
    rate = ((bandwidth or {}).get("cpu") or {}).get("bytes_per_s")  # a decode step's bytes (suite.analyse.step_bytes)
    return {
        "cpu": {
            "caches": reached(caches, bandwidth),
            "gathers": gathers if isinstance(gathers, dict) else None,
            "step_max": max(ratio - 1.0, 0.0) if math.isfinite(ratio) else math.inf,
            "bytes_per_s": float(rate) if isinstance(rate, (int, float)) and rate > 0 else None,
        }
    }


def reached(caches: dict, bandwidth: dict | None) -> dict:
    """The caches with the last level at the reach the run's bandwidth sweep measured (suite.machine.stream.sweep)
    where that is less than sysfs says: sysfs can report a socket's whole shared L3, far beyond where this core's
    triad falls to DRAM's rate (docs/CLAIMS.md, "Verdicts"; docs/performance.md, "Figures behind the code's
    choices")."""
    sweep = ((bandwidth or {}).get("cpu") or {}).get("sweep")
    reach = sweep.get("reach_bytes") if isinstance(sweep, dict) else None
    try:
        last = max(caches, key=lambda name: caches[name]["bytes"])
        if isinstance(reach, (int, float)) and 0 < reach < caches[last]["bytes"]:
            return {**caches, last: {**caches[last], "bytes": int(reach), "sysfs_bytes": caches[last]["bytes"]}}
    except (KeyError, TypeError):
        pass
    return caches


def _per_length(group: pd.DataFrame, axis: str, column: str, x) -> np.ndarray | None:
    if column not in group:
        return None
    values = pd.to_numeric(group[column], errors="coerce")
    by_x = values.groupby(group[axis]).median()
    out = by_x.reindex(x).to_numpy(float)
    return out if np.all(np.isfinite(out)) else None


def working_set(group: pd.DataFrame, axis: str, x) -> np.ndarray | None:
    """Bytes a kernel reuses at each length: an attention head's K and V (kv_bytes over B·H_kv), or,
    where the variant has no K/V count (a layer: all its channels at once), a sequence's whole
    compulsory traffic (over B)."""
    first = group.iloc[0]
    batch, kv_heads = first.get("batch", 1), first.get("num_kv_heads", first.get("num_heads", 1))
    kv = _per_length(group, axis, "kv_bytes", x)
    if kv is not None:
        return kv / (batch * kv_heads)
    moved = _per_length(group, axis, "compulsory_bytes", x)
    return None if moved is None else moved / batch


def gathered(group: pd.DataFrame) -> bool:
    """Whether every row says its implementation's leading term is random gathers (Impl.gathers)."""
    said = group.get("impl_gathers")
    return said is not None and bool(said.eq(True).all())


def process_times(group: pd.DataFrame, axis: str, x) -> list | None:
    if "replicate_times_s" not in group:
        return None
    out = []
    for value in x:
        lists = [v for v in group.loc[group[axis] == value, "replicate_times_s"] if v is not None]
        merged = [float(t) for v in lists for t in (v if hasattr(v, "__len__") else [v])]
        out.append(merged if len(merged) > 1 else None)
    return out


def paths(group: pd.DataFrame, axis: str, x) -> Paths | None:
    """The path each length ran on, where the implementation names it (its notes' "path": a change of
    how it runs within the span, e.g. fixed/native's blocks as one tile from l = 128); None where it
    names one path throughout, or leaves some length unnamed (rows of older code: which path those took
    is not known, so none is modelled)."""
    if "notes" not in group:
        return None
    named = group["notes"].map(lambda v: _notes(v).get("path"))
    by_x = named.groupby(group[axis]).agg(lambda v: v.mode().iloc[0] if v.notna().any() else None).reindex(x)
    return None if by_x.isna().any() else declared(by_x.tolist())


def _notes(value) -> dict:
    """A row's notes: a dict, or its JSON text (as in the run's table)."""
    if isinstance(value, dict):
        return value
    try:
        loaded = json.loads(value) if isinstance(value, str) else {}
    except ValueError:
        return {}
    return loaded if isinstance(loaded, dict) else {}


def judge_series(
    series: pd.Series,
    group: pd.DataFrame,
    axis: str,
    claimed: float,
    hosts: dict | None,
    bootstrap: int = cost.BOOTSTRAP,
) -> cost.CostVerdict:
    """The cost-model verdict of one time series (`series`: fastest call per length)."""
    x = series.index.to_numpy(float)
    info = (hosts or {}).get(group.iloc[0].get("device"))
    ws = working_set(group, axis, x)
    said = info is not None and ws is not None and claimed > 0 and gathered(group)
    rate = gather_rate(info.get("gathers"), np.asarray(ws, float) / 2) if said else None  # at a head's K
    hw = machine(ws, info["caches"], info["step_max"], rate) if info else None
    result = cost.judge(
        x,
        series.to_numpy(float),
        claimed,
        hw,
        process_times=process_times(group, axis, x),
        bootstrap=bootstrap,
        paths=paths(group, axis, x),
    )
    return replace(result, reason=result.reason.noted(Note.NO_PROBE)) if said and rate is None else result


def columns(result: cost.CostVerdict, claimed: float, of: str = "time") -> dict:
    """What the fits table shows of a cost-model verdict (`of`: what it models, time or the peak)."""
    model = result.model
    shares = model.shares if model is not None else {}
    return {
        "terms": explain(result, claimed, of),
        "need_p": result.need_p,
        "higher_p": result.higher_p,
        "higher_term": result.higher,
        "higher_share": result.higher_share,
        "lead_share": shares.get(cost.power_name(claimed), 0.0 if claimed else shares.get("call", math.nan))
        if model is not None
        else math.nan,
        "steps": ", ".join(f"{level} at n ≈ {n:.0f}" for level, n in result.steps.items()),
        "verdict_from": result.alone,
    }


def explain(result: cost.CostVerdict, claimed: float, of: str = "time") -> str:
    """ "n^1.5 carries 64% [58, 70] of the time at n = 65536; rows (n) 30%; call 6%; L2 step at n ≈ 1024"."""
    model = result.model
    if model is None:
        return ""
    labels = (
        {
            "call": "the per-call floor",
            "rows": "per row or block (n)",
            cost.GATHERS: "the gathers' rise (this host's rate for random rows)",
        }
        if of == "time"
        else {"call": "the floor (fixed buffers)", "rows": "per row (n: the output)"}
    )
    parts = []
    for name in sorted(model.shares, key=lambda k: -model.shares[k]):
        share = model.shares[name]
        if not share > cost.NAMED:
            continue
        label = labels.get(name, f"the leading term {name}" if name == cost.power_name(claimed) else name)
        interval = (
            f" [{result.share_lo[name]:.0%}, {result.share_hi[name]:.0%}]"
            if name in result.share_lo and not math.isnan(result.share_lo[name])
            else ""
        )
        parts.append(f"{label} {share:.0%}{interval}")
    steps = [f"{level} passed at n ≈ {n:.0f}" for level, n in result.steps.items()]
    if result.paths:
        steps.append(
            "path "
            + " → ".join(
                f"{name} (from n = {first:g}"
                + (
                    ", fitted alone"
                    if first == result.alone
                    else ""
                    if not i or math.isnan(factor)
                    else f", ×{factor:.2f} the leading term's rate"
                )
                + ")"
                for i, (name, first, factor) in enumerate(result.paths)
            )
        )
    return (
        "; ".join(parts)
        + (f" of the {of} at the largest n" if parts else "")
        + ("; " + ", ".join(steps) if steps else "")
    )
