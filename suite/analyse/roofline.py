"""The roofline of each case: time ≥ max(FLOPs / compute peak, bytes / bandwidth), both ceilings
measured in the same run (the GEMM probe, probe.json; the bandwidth probe, bandwidth.json).

Two bounds per case, one for each byte count of docs/CLAIMS.md ("Bytes"): with the compulsory
bytes (no implementation of the algorithm moves less) and with the algorithm's traffic (what it
moves when its working set leaves the cache). A row's share of a bound is the bound's time over its
measured median time: the useful FLOP/s over the attainable rate min(peak, bandwidth × intensity),
where the intensity is the FLOPs over the bytes. Which ceiling binds is the larger of the two terms.
The FLOPs are the algorithm's products (`product_flops`: `flops` and its named terms that are
matrix products, a feature map's or a projection's; suite.analyse.tables.efficiency).
A run without a bandwidth probe (older runs), or a case without a byte count, has no bound: NaN.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

BOUNDS = {"traffic": "traffic_bytes", "compulsory": "compulsory_bytes"}


def bandwidth_of(bandwidth: dict | None, device: str, key: str = "bytes_per_s") -> float:
    """The device's measured bandwidth (bandwidth.json), NaN where the run has none."""
    try:
        return float(bandwidth[device][key])
    except (KeyError, TypeError, ValueError):
        return np.nan


def roofline(frame: pd.DataFrame, bandwidth: dict | None) -> pd.DataFrame:
    """Per row of an efficiency frame (product_flops, time_s, peak_flops_per_s, device, the byte
    counts): the bandwidth, and for each bound its intensity, time, share and binding ceiling."""
    out = pd.DataFrame(index=frame.index)
    out["bandwidth_bytes_per_s"] = [bandwidth_of(bandwidth, device) for device in frame["device"]]
    # the cache level's: a second ceiling the figure draws, which no bound here uses
    out["cache_bandwidth_bytes_per_s"] = [
        bandwidth_of(bandwidth, device, "cache_bytes_per_s") for device in frame["device"]
    ]
    flops = frame["product_flops"]
    compute_s = flops / frame["peak_flops_per_s"]
    for name, column in BOUNDS.items():
        moved = pd.to_numeric(frame[column], errors="coerce") if column in frame else pd.Series(np.nan, frame.index)
        memory_s = moved / out["bandwidth_bytes_per_s"]
        bound = np.maximum(compute_s, memory_s)  # NB: NaN where either is
        out[f"intensity_{name}"] = flops / moved
        out[f"roofline_{name}_s"] = bound
        out[f"roofline_{name}_share"] = bound / frame["time_s"]
        out[f"roofline_{name}_binds"] = np.where(
            bound.isna(), None, np.where(memory_s > compute_s, "memory", "compute")
        )
    return out
