"""Memory's verdicts: one call's peak above its inputs (`peak_bytes`) against n, judged against its variant's
claim of extra memory (variants.rules.MemoryClaim; docs/CLAIMS.md, "Memory: what a call keeps").

The peak is modelled by the cost model of time (suite.analyse.cost) without cache steps or paths:

    peak(n) ≈ c_floor + c_rows·n + c_lead·nᵖ

a floor (fixed buffers, the allocator's granularity, a library's workspace), a cost per row (the output and,
in training, the gradients: O(n) for every variant, counted in the peak, as they are allocated within the call;
for a claim of n¹ it is the claim's own term) and the claim's term; the higher class's F test decides a
refutation as it does for time (claim_rule.decide_memory). The peak is read from the same calls that are timed:
no case is added for it.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from suite.analyse import claim_rule, cost

COLUMN = "claimed_memory_exponent_n"


def with_claims(frame: pd.DataFrame) -> pd.DataFrame:
    """The table with each row's memory claim: the row's own where it was measured with one, else its variant's
    declared claim for its mode (a table of earlier versions: the claim is the variant's, not the run's)."""
    import variants

    known = set(variants.names())

    def claim(row) -> float:
        if COLUMN in row and not pd.isna(row[COLUMN]):
            return float(row[COLUMN])
        if row["variant"] not in known or pd.isna(row.get("claimed_exponent_n", np.nan)):
            return math.nan
        value = variants.get(row["variant"]).memory_exponent(row["mode"], float(row["claimed_exponent_n"]))
        return math.nan if value is None else float(value)

    out = frame.copy()
    out[COLUMN] = [claim(row) for _, row in frame.iterrows()] if len(frame) else pd.Series(dtype=float)
    return out


def claimed(row: pd.Series) -> float | None:
    """The memory claim of a fit in n, or None: a decode step, cross attention and padded batches claim none."""
    if not pd.isna(row.get("kv_len", np.nan)) or not pd.isna(row.get("valid_fraction", np.nan)):
        return None
    value = row.get(COLUMN, np.nan)
    return None if value is None or pd.isna(value) else float(value)


def judge_series(series: pd.Series, claim: float, bootstrap: int = cost.BOOTSTRAP) -> cost.CostVerdict:
    """The verdict on one series' peaks (`series`: peak bytes per length) against its claim."""
    return cost.judge(
        series.index.to_numpy(float),
        series.to_numpy(float),
        claim,
        None,
        bootstrap=bootstrap,
        rule=claim_rule.decide_memory,
    )
