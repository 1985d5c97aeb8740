"""The per-layer table of Vaswani et al. 2017 (Table 1), measured.

Self-attention, recurrent, convolutional and restricted self-attention layers: the claimed
complexity per layer, sequential operations and path length beside the fitted time exponents in n
and in d, and the n above which each layer is cheaper than self-attention (the table says: a
recurrent layer is dearer than attention while n < d). Rows are data: one entry per layer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class Layer:
    name: str
    variant: str
    impl: str
    complexity: str  # per layer, as the table states it (d: the model width)
    sequential: str
    path: str


LAYERS = (
    Layer("self-attention", "full", "sdpa", "O(n²·d)", "O(1)", "O(1)"),
    Layer("recurrent", "rnn", "native", "O(n·d²)", "O(n)", "O(n)"),
    Layer("convolutional", "conv", "native", "O(k·n·d²)", "O(1)", "O(log_k n)"),
    Layer("self-attention (restricted)", "sliding_window", "native", "O(r·n·d)", "O(1)", "O(n/r)"),
)
REFERENCE = "full/sdpa"


def _fit(fits: pd.DataFrame, layer: Layer, axis: str) -> pd.Series | None:
    """The layer's forward, non-causal time fit in `axis` at default parameters; of several (other
    shapes held fixed), the one over the most points, then the widest span."""
    if fits.empty:
        return None
    rows = fits[
        (fits["variant"] == layer.variant)
        & (fits["impl"] == layer.impl)
        & (fits["axis"] == axis)
        & (fits["metric"] == "time")
        & (fits["mode"] == "fwd")
        & ~fits["causal"].astype(bool)
        & (fits["series"] == layer.impl)
    ]
    if rows.empty:
        return None
    return rows.sort_values(["points", "span"], ascending=False).iloc[0]


def _crossover(crossovers: pd.DataFrame, layer: Layer, fit: pd.Series | None) -> str:
    if layer.variant == "full" or crossovers.empty or fit is None:
        return ""
    rows = crossovers[
        (crossovers["variant"] == layer.variant)
        & (crossovers["impl"] == layer.impl)
        & (crossovers["reference"] == REFERENCE)
        & (crossovers["series"] == layer.impl)
        & (crossovers["head_dim"] == fit["head_dim"])
        & (crossovers["num_heads"] == fit["num_heads"])
    ]
    return "" if rows.empty else str(rows.iloc[0]["crossover"])


def layer_table(fits: pd.DataFrame, crossovers: pd.DataFrame) -> pd.DataFrame:
    """One row per layer that was measured: claims beside the fitted exponents and the crossover."""
    records = []
    for layer in LAYERS:
        in_n, in_d = _fit(fits, layer, "seq_len"), _fit(fits, layer, "head_dim")
        if in_n is None and in_d is None:
            continue
        record = {
            "layer": layer.name,
            "series": f"{layer.variant}/{layer.impl}",
            "complexity": layer.complexity,
            "sequential": layer.sequential,
            "path": layer.path,
            "width": "" if in_n is None else f"D = {int(in_n['num_heads'] * in_n['head_dim'])}",
            "crossover": _crossover(crossovers, layer, in_n),
        }
        for key, fit in (("n", in_n), ("d", in_d)):
            for field in ("slope", "lo", "hi", "claimed", "verdict"):
                record[f"{key}_{field}"] = np.nan if fit is None else fit[field]
        records.append(record)
    return pd.DataFrame.from_records(records)
