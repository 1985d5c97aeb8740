"""Crossovers and speed-ups against full attention, efficiency against the device's measured
ceilings, and the status matrix."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd

from suite.analyse.exponents import prepare
from suite.analyse.roofline import roofline
from variants.rules import FWD_BWD_FLOP_FACTOR, PRODUCT_TERMS

# ------------------------------------------------------------------------------ crossover
SAME_SHAPE = ["device", "dtype", "mode", "batch", "num_heads", "head_dim", "causal"]


def against_full(frame: pd.DataFrame, references: tuple[str, ...]):
    """Yield (series info, reference, its medians, full's) per sub-quadratic series and reference
    implementation of `full` at the same shape: time_s and flops per seq_len, at the n both have."""
    data = prepare(frame)
    ok = data[(data["status"] == "ok") & data["time_s"].notna()]
    ok = ok[ok["kv_len"].isna() & ok["valid_fraction"].isna()]  # self-attention over full sequences
    full = ok[(ok["variant"] == "full") & ok["impl"].isin(references)]
    fulls = {keys: _medians(group) for keys, group in full.groupby(["impl"] + SAME_SHAPE, sort=False)}
    candidates = ok[(ok["variant"] != "full") & (ok["claimed_exponent_n"] < 2) & (ok["mode"] != "decode")]
    for keys, group in candidates.groupby(["variant", "impl", "params"] + SAME_SHAPE, sort=False):
        info = {**dict(zip(["variant", "impl", "params"] + SAME_SHAPE, keys)), "series": group.iloc[0]["series"]}
        mine = _medians(group)
        for ref in references:
            theirs = fulls.get((ref, *keys[3:]), mine.iloc[:0])
            common = mine.index.intersection(theirs.index)
            yield info, f"full/{ref}", mine.loc[common], theirs.loc[common]


def _medians(group: pd.DataFrame) -> pd.DataFrame:
    return group.groupby("seq_len")[["time_s", "flops"]].median()


def crossovers(frame: pd.DataFrame, references=("dense", "sdpa")) -> pd.DataFrame:
    """Per sub-quadratic series, the n above which it beats `full` (each reference implementation).

    From the measured times at the n both have, interpolated linearly in log(time ratio) against
    log(n) between the last two points where the sign changes; never extrapolated.
    """
    records = []
    for info, ref, mine, theirs in against_full(frame, references):
        if len(mine) < 2:
            continue
        ratio = np.log(mine["time_s"].to_numpy() / theirs["time_s"].to_numpy())  # < 0: faster
        records.append({**info, "reference": ref, **_crossing(mine.index.to_numpy(float), ratio)})
    return pd.DataFrame.from_records(records)


def speedups(frame: pd.DataFrame, references=("dense", "sdpa")) -> pd.DataFrame:
    """Per sub-quadratic series and n it shares with a reference implementation of `full`: the
    speed-up its FLOPs allow (full's FLOPs over its own: what it would gain at full's rate) and the
    speed-up measured (full's median time over its own). NATTEN states a pattern's speed this way."""
    records = [
        {
            **info,
            "reference": ref,
            "seq_len": n,
            "flops_bound": theirs.at[n, "flops"] / mine.at[n, "flops"],
            "speedup": theirs.at[n, "time_s"] / mine.at[n, "time_s"],
        }
        for info, ref, mine, theirs in against_full(frame, references)
        for n in mine.index
    ]
    return pd.DataFrame.from_records(records)


def _crossing(n: np.ndarray, log_ratio: np.ndarray) -> dict:
    faster = log_ratio < 0
    span = f"n = {n[0]:g}–{n[-1]:g}"
    if faster.all():
        return {"crossover_n": np.nan, "crossover": f"faster at every measured n ({span})"}
    if not faster[-1]:
        return {
            "crossover_n": np.nan,
            "crossover": f"slower at every measured n up to {n[-1]:g}"
            if not faster.any()
            else f"slower again at n = {n[-1]:g}",
        }
    i = int(np.flatnonzero(~faster)[-1])  # last slower point; faster from i + 1 on
    a, b = np.log(n[i]), np.log(n[i + 1])
    t = log_ratio[i] / (log_ratio[i] - log_ratio[i + 1])
    cross = float(np.exp(a + t * (b - a)))
    return {"crossover_n": cross, "crossover": f"faster above n ≈ {cross:,.0f} (interpolated in {span})"}


# ------------------------------------------------------------------------------ efficiency
def efficiency(frame: pd.DataFrame, peaks: dict | None, bandwidth: dict | None = None) -> pd.DataFrame:
    """Per ok case: useful FLOP/s (the algorithm's FLOPs over the time), its share of the device's
    measured matmul peak, counted-vs-theory work, and its roofline against the measured peak and
    bandwidth (suite.analyse.roofline)."""
    data = prepare(frame)
    ok = data[(data["status"] == "ok") & data["time_s"].notna()].copy()
    ok["useful_flops_per_s"] = ok["flops"] / ok["time_s"]
    ok["work_ratio"] = ok["flops_counted"] / ok["flops"]  # > 1: the implementation does extra work
    peak = [_peak(peaks, device, dtype) for device, dtype in zip(ok["device"], ok["dtype"])]
    ok["peak_flops_per_s"] = peak
    # NB: the useful rate, not the counted one: FlopCounterMode counts causal SDPA as full attention
    ok["peak_share"] = ok["useful_flops_per_s"] / ok["peak_flops_per_s"]
    ok["all_flops"] = all_terms(ok)
    ok["product_flops"] = all_terms(ok, PRODUCT_TERMS)  # the roofline's work (suite.analyse.roofline)
    ok["product_flops_per_s"] = ok["product_flops"] / ok["time_s"]
    ok["all_terms_share"] = ok["all_flops"] / ok["time_s"] / ok["peak_flops_per_s"]
    ok["output_bytes"] = output_bytes(ok)
    ok["memory_ratio"] = ok["peak_bytes"] / ok["output_bytes"]  # the call's own memory, in outputs
    ok["op_shares"] = ok["op_seconds"].map(op_shares) if "op_seconds" in ok else None
    ok["energy_per_call_j"] = ok["gpu_energy_per_call_j"].astype(float) if "gpu_energy_per_call_j" in ok else np.nan
    ok["energy_per_token_j"] = ok["energy_per_call_j"] / tokens(ok)
    return pd.concat([ok, roofline(ok, bandwidth)], axis=1)


def tokens(frame: pd.DataFrame) -> pd.Series:
    """The tokens one call attends for: B·n queries; one per sequence in decode; a padded batch's valid
    tokens. What energy per token divides by."""
    rows = np.where(frame["mode"] == "decode", 1, frame["seq_len"]) * frame["batch"]
    valid = frame["valid_tokens"].astype(float) if "valid_tokens" in frame else pd.Series(np.nan, index=frame.index)
    return valid.where(valid.notna() & (frame["mode"] != "decode"), rows).astype(float)


def op_shares(spent) -> dict[str, float] | None:
    """A row's op_seconds (a dict or its JSON, as stored) as shares of the profiled call's self time,
    largest first; None where the call was not profiled."""
    if isinstance(spent, str):
        spent = json.loads(spent)
    if not isinstance(spent, dict) or not spent:
        return None
    total, shares = sum(spent.values()), {}
    for name, seconds in spent.items():
        shares[op_name(name)] = shares.get(op_name(name), 0.0) + seconds / total
    return dict(sorted(shares.items(), key=lambda item: -item[1]))


COMPILED_NAMES = (
    (re.compile(r"^## Call CompiledFxGraph \w+ ##$"), "compiled graph (inductor)"),
    (re.compile(r"^Torch-Compiled Region: [\d/]+$"), "compiled region (dynamo)"),
)


def op_name(name: str) -> str:
    """An operator's name as the report shows it: a compiled graph's call without its hash (the
    results keep it), a compiled region without its frame numbers."""
    for pattern, shown in COMPILED_NAMES:
        if pattern.match(name):
            return shown
    return name


def all_terms(frame: pd.DataFrame, names: frozenset[str] | None = None) -> pd.Series:
    """The algorithm's FLOPs with its named terms apart (linformer's projections, a feature map's
    GEMMs, reformer's hashing, the softmax's operations), or those of them in `names`: what the
    algorithm computes in all. In fwd_bwd the terms count 3× too, as `flops` does (docs/CLAIMS.md, "Modes")."""
    extra = (
        frame["extra_flops"].map(lambda terms: _sum_terms(terms, names)).astype(float)
        if "extra_flops" in frame
        else 0.0
    )
    factor = np.where(frame["mode"] == "fwd_bwd", FWD_BWD_FLOP_FACTOR, 1)
    return frame["flops"] + factor * extra


def _sum_terms(terms, names: frozenset[str] | None = None) -> float:
    """A row's extra_flops, a dict or its JSON (as stored), summed (those in `names`, if given); 0
    where there is none."""
    if isinstance(terms, str):
        terms = json.loads(terms)
    if not isinstance(terms, dict):
        return 0.0
    return float(sum(flops for name, flops in terms.items() if names is None or name in names))


def output_bytes(frame: pd.DataFrame) -> pd.Series:
    """The size of one call's output (B, H, n_q, d): the yardstick of the memory a call needs."""
    from suite.plan.case import DTYPES

    size = (
        frame["dtype"].map(lambda name: DTYPES[name].itemsize).astype(float)
    )  # NB: pandas 3 maps an empty column to text
    rows = np.where(frame["mode"] == "decode", 1, frame["seq_len"])
    return frame["batch"] * frame["num_heads"] * rows * frame["head_dim"] * size


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
