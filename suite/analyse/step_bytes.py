"""A decode step judged on the bytes it reads: what its time's rise would read at the run's memory bandwidth,
against the bytes its claim's step reads (the theory's `compulsory_bytes`: docs/CLAIMS.md, "Bytes") and its
cache's K and V.

A decode step does a few FLOPs a byte: it is bound by what it reads. Full attention's step reads its whole cache
(`2·B·H_kv·n·d·e`), a window's its `w + 1` keys, a linearized step its running state (`m·d + m` a head, whatever
n). Its time's rise from the shortest length to the longest, at the memory bandwidth bandwidth.json measured, is
the most it could have read beyond its shortest length's bytes; compute only adds time. A step whose claim's bytes
rise by less than half its cache's, and whose time rises by what reading half its cache takes (a step that rescans
its cache where its claim says a state or a window) is refuted, whatever the span: no overhead reads bytes. Where
half its cache would take less time than the shortest step itself, the bound could not see a rescan (inconclusive);
else it is confirmed. Needs no 16x span: it is a bound from the machine, not a fit (docs/CLAIMS.md, "Verdicts").
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from suite.analyse.claim_rule import Reason, Why
from suite.plan.case import DTYPES

SHARE = 0.5  # of the cache's rise: the bytes a step's time may not account for where its claim reads less
COLUMNS = ("bytes_verdict", "bytes_why", "bytes_reason")


def applies(group: pd.DataFrame, axis: str, metric: str) -> bool:
    return axis == "seq_len" and metric == "time" and (group["mode"] == "decode").all()


def cache_bytes(row: pd.Series, n: np.ndarray) -> np.ndarray:
    """K and V of a cache of n keys: 2·B·H_kv·n·d·e."""
    size = DTYPES[row["dtype"]].itemsize if row["dtype"] in DTYPES else 4
    return 2.0 * row["batch"] * row["num_kv_heads"] * n * row["head_dim"] * size


def judge(series: pd.Series, group: pd.DataFrame, hosts: dict | None) -> tuple[str, Why] | None:
    """The bytes verdict of one decode time series (`series`: fastest call per length), or None where the run has
    no memory bandwidth for its device or the rows no bytes model."""
    first = group.iloc[0]
    rate = ((hosts or {}).get(first.get("device")) or {}).get("bytes_per_s")
    if not rate or "compulsory_bytes" not in group or len(series) < 2:
        return None
    claim = pd.to_numeric(group["compulsory_bytes"], errors="coerce").groupby(group["seq_len"]).median()
    claim = claim.reindex(series.index)
    if claim.isna().any():
        return None
    n = series.index.to_numpy(float)
    low, top = n.argmin(), n.argmax()
    cache = cache_bytes(first, n)
    cache_rise, claim_rise = cache[top] - cache[low], float(claim.iloc[top] - claim.iloc[low])
    read = max(float(series.iloc[top] - series.iloc[low]), 0.0) * rate  # the most the rise could read
    facts = {
        "low": n[low],
        "top": n[top],
        "read_mb": read / 1e6,
        "claim_kb": float(claim.iloc[top]) / 1e3,
        "cache_mb": cache[top] / 1e6,
        "share": (read - max(claim_rise, 0.0)) / cache_rise if cache_rise else 0.0,
        "gbps": rate / 1e9,
    }
    if claim_rise < SHARE * cache_rise and read - max(claim_rise, 0.0) >= SHARE * cache_rise:
        return "refuted", Why(Reason.BYTES_CACHE, facts)
    unseen = SHARE * cache_rise / rate
    if unseen < float(series.iloc[low]):
        return "inconclusive", Why(
            Reason.BYTES_UNSEEN, {**facts, "unseen_us": unseen * 1e6, "step_us": float(series.iloc[low]) * 1e6}
        )
    return "confirmed", Why(Reason.BYTES_WITHIN, facts)


def columns(series: pd.Series, group: pd.DataFrame, hosts: dict | None) -> dict:
    """The fits table's bytes columns of a decode time fit (empty where `judge` says nothing)."""
    found = judge(series, group, hosts)
    if found is None:
        return {}
    status, why = found
    return {"bytes_verdict": status, "bytes_why": str(why), "bytes_reason": why.reason.value, "_bytes_why": why}


def refute(record: dict) -> None:
    """A decode step refuted by its bytes is refuted, whatever its time's model says over its span."""
    why = record.pop("_bytes_why", None)
    if why is not None and record.get("bytes_verdict") == "refuted" and record["verdict"] != "refuted":
        record["verdict"] = "refuted"
        record["_why"] = Why(Reason.BY_BYTES, why.facts, record["_why"])
        record["why"] = str(record["_why"])
