"""Every claim's verdict at a glance: a row per variant and implementation (device, dtype), a column per slice of
the claims (forward time, training time, causal time, decode, forward memory, training memory, heads, head dim),
each cell the verdict of that slice's series, read off the fits table (suite.analyse.exponents).

A slice holds the fits it names; a cell with more than one series (a parameter's sweep, KV-head ratios) is
refuted where any is, inconclusive where any is not settled, else confirmed, and says how many series it holds.
Heads and head dim keep the power law's verdict (docs/CLAIMS.md, "Heads and head dim").
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

KEYS = ["variant", "impl", "device", "dtype"]
ORDER = ("refuted", "inconclusive", "confirmed")  # a cell's verdict: the first any of its series has


@dataclass(frozen=True)
class Slice:
    name: str  # the column's title
    anchor: str  # the detail's id in the report (a card links to its own headings)
    axis: str
    metric: str
    mode: str | None = None  # None: any mode
    causal: bool | None = None  # None: either


SLICES = (
    Slice("forward time", "verdicts", "seq_len", "time", "fwd", False),
    Slice("training time", "training", "seq_len", "time", "fwd_bwd"),
    Slice("causal time", "causal", "seq_len", "time", "fwd", True),
    Slice("decode", "decode", "seq_len", "time", "decode"),
    Slice("forward memory", "verdicts", "seq_len", "memory", "fwd", False),
    Slice("training memory", "training", "seq_len", "memory", "fwd_bwd"),
    Slice("heads", "other-axes", "num_heads", "time"),
    Slice("head dim", "other-axes", "head_dim", "time"),
)


def rows_of(fits: pd.DataFrame, one: Slice) -> pd.DataFrame:
    """The fits of one slice with a claim: in its axis and metric, its mode, causal or not; in n, self-attention
    without padding (cross attention and padded batches have their own tables)."""
    if fits.empty:
        return fits
    keep = (fits["axis"] == one.axis) & (fits["metric"] == one.metric) & fits["claimed"].notna()
    if one.mode is not None:
        keep &= fits["mode"] == one.mode
    if one.causal is not None:
        keep &= fits["causal"].astype(bool) == one.causal
    for column in ("kv_len", "valid_fraction"):
        if column in fits:
            keep &= fits[column].isna()
    return fits[keep]


def cell(verdicts: pd.Series) -> str:
    """A cell's verdict, and how many series it holds where more than one: "refuted (1 of 3)"."""
    found = [v for v in verdicts if isinstance(v, str)]
    if not found:
        return ""
    worst = next((v for v in ORDER if v in found), found[0])
    return worst if len(found) == 1 else f"{worst} ({found.count(worst)} of {len(found)})"


def glance(fits: pd.DataFrame) -> pd.DataFrame:
    """The table: KEYS, then a column per slice's name holding its cell ("" where the slice has no series)."""
    if fits.empty:
        return pd.DataFrame(columns=KEYS + [one.name for one in SLICES])
    parts = []
    for one in SLICES:
        rows = rows_of(fits, one)
        if not rows.empty:
            parts.append(rows.groupby(KEYS, sort=True, dropna=False)["verdict"].agg(cell).rename(one.name))
    if not parts:
        return pd.DataFrame(columns=KEYS + [one.name for one in SLICES])
    table = pd.concat(parts, axis=1).reindex(columns=[one.name for one in SLICES]).astype(object).fillna("")
    return table.reset_index().sort_values(KEYS).reset_index(drop=True)


def verdict_of(text: str) -> str:
    """The verdict a cell starts with ("" for an empty cell): for its colour."""
    return text.split(" ", 1)[0] if text else ""
