"""A run's timings in other tools' formats: pytest-benchmark's JSON and github-action-benchmark's."""

from __future__ import annotations

import json
import numbers

import pandas as pd

from suite.plan.case import KEY_KINDS
from suite.store.row import CASE_FIELDS

# A case field's prefix in a benchmark's name; a field without one is shown bare (ORDER) or as name=value
LABELS = {
    "seq_len": "n",
    "kv_len": "nk",
    "valid_fraction": "valid",
    "batch": "B",
    "num_heads": "H",
    "num_kv_heads": "Hkv",
    "head_dim": "d",
}
ORDER = (
    "impl",
    "device",
    "dtype",
    "mode",
    "seq_len",
    "kv_len",
    "valid_fraction",
    "batch",
    "num_heads",
    "num_kv_heads",
    "head_dim",
    "causal",
)  # the rest of the case's fields follow, in their own order
INTEGERS = {name for name, kind in KEY_KINDS.items() if kind is int}


def _name(row: pd.Series) -> str:
    """VARIANT[every other field of the case's key]: distinct cases get distinct names (a field a case
    leaves unset, kv_len or valid_fraction, is left out, as its key leaves it out)."""
    fields = [*ORDER, *(name for name in CASE_FIELDS if name not in (*ORDER, "variant", "params"))]
    parts = [_part(name, row.get(name)) for name in fields]
    params = json.loads(row["params"]) if isinstance(row["params"], str) and row["params"] else {}
    extra = "".join(f",{k}={v}" for k, v in sorted(params.items()))
    return f"{row['variant']}[{'-'.join(p for p in parts if p)}{extra}]"


def _part(name: str, value: object) -> str:
    if value is None or (isinstance(value, float) and value != value):  # NB: NaN: the field is unset
        return ""
    if name == "causal":
        return "causal" if value else ""
    if isinstance(value, numbers.Integral) or (name in INTEGERS and isinstance(value, float)):
        value = int(value)  # NB: an integer column turns float where a merged table held NaN
    elif isinstance(value, numbers.Real):
        value = float(value)
    return f"{LABELS[name]}{value}" if name in LABELS else str(value) if name in ORDER else f"{name}={value}"


def _timer(device: str) -> str:
    from suite.machine.device import DEVICES

    return DEVICES[device].timer_name if device in DEVICES else "unknown"


def pytest_benchmark(frame: pd.DataFrame, env: dict) -> dict:
    """pytest-benchmark's saved-run JSON (`pytest-benchmark compare` reads it), one benchmark per ok case.

    Statistics come from pytest-benchmark's own Stats over the case's raw samples (all processes).
    """
    from pytest_benchmark import __version__
    from pytest_benchmark.stats import Stats

    benchmarks = []
    for _, row in frame[frame["status"] == "ok"].iterrows():
        stats = Stats()
        for sample in row["samples"]:
            stats.update(float(sample))
        name = _name(row)
        benchmarks.append(
            {
                "group": row["variant"],
                "name": name,
                "fullname": f"suite::{name}",
                "params": {"impl": row["impl"], "seq_len": int(row["seq_len"])},
                "param": name.split("[", 1)[1][:-1],
                "extra_info": {
                    "case_id": row["case_id"],
                    "flops": int(row["flops"]),
                    "peak_bytes": None if pd.isna(row["peak_bytes"]) else int(row["peak_bytes"]),
                    "replicate_times_s": [float(x) for x in row["replicate_times_s"]]
                    if row.get("replicate_times_s") is not None
                    else None,
                },
                "options": {"timer": _timer(row["device"]), "min_rounds": len(row["samples"])},
                "stats": {**stats.as_dict(), "data": [float(x) for x in row["samples"]], "iterations": 1},
            }
        )
    return {
        "machine_info": {
            "node": env.get("platform"),
            "processor": env.get("cpu_model"),
            "cpu": {"count": env.get("cpu_count"), "brand_raw": env.get("cpu_model")},
            "python_version": env.get("python"),
            "torch": env.get("torch"),
            "fingerprint_id": env.get("fingerprint_id"),
        },
        "commit_info": {
            "id": (env.get("git_commit") or "").removesuffix("-dirty") or None,
            "dirty": str(env.get("git_commit", "")).endswith("-dirty"),
        },
        "benchmarks": benchmarks,
        "datetime": env.get("datetime") or pd.Timestamp.now(tz="UTC").isoformat(),
        "version": __version__,
    }


def github_action_benchmark(frame: pd.DataFrame) -> list[dict]:
    """github-action-benchmark's `customSmallerIsBetter` input: name, unit, value, range, extra."""
    out = []
    for _, row in frame[frame["status"] == "ok"].iterrows():
        reps = row.get("replicate_times_s")
        spread = (max(reps) - min(reps)) / 2 if reps is not None and len(reps) > 1 else row["time_iqr_s"] / 2
        out.append(
            {
                "name": _name(row),
                "unit": "ms",
                "value": round(float(row["time_s"]) * 1e3, 6),
                "range": f"± {float(spread) * 1e3:.6f}",
                "extra": f"case {row['case_id']}; {len(row['samples'])} samples; FLOPs {int(row['flops'])}",
            }
        )
    return out
