"""Memory's verdicts (docs/CLAIMS.md, "Memory: what a call keeps"): a hidden n² buffer in a real path's measured
peaks is refuted, its clean twin confirmed, and a peak that keeps less than its claim is within it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from suite.analyse import claim_rule
from suite.analyse.claim_rule import Reason
from suite.analyse.exponents import claims, exponents

CARD = Path(__file__).resolve().parents[3] / "docs" / "runs" / "cpu-full"
# a native path built to its linear claim, over the span of lengths its ladder climbed in the card's run
SERIES = (
    "variant == 'bigbird' and impl == 'native' and mode == 'fwd' and not causal and num_heads == 8 "
    "and head_dim == 64 and params == '{}' and status == 'ok'"
)


def _rows() -> pd.DataFrame:
    rows = pd.read_parquet(CARD / "results.parquet").query(SERIES)
    assert rows["seq_len"].nunique() >= 8
    # the claim comes from the variant's declaration (a table of earlier versions has no column for it)
    return rows.drop(columns=["claimed_memory_exponent_n"], errors="ignore")


def _planted(rows: pd.DataFrame, share: float) -> pd.DataFrame:
    """The same calls with a hidden n² buffer that is `share` of the planted peak at the top length."""
    top = rows.loc[rows["seq_len"].idxmax()]
    extra = share / (1 - share) * float(top["peak_bytes"]) * (rows["seq_len"] / float(top["seq_len"])) ** 2
    return rows.assign(peak_bytes=(rows["peak_bytes"] + extra).round().astype("int64"))


def _memory_fit(rows: pd.DataFrame) -> pd.Series:
    fits = exponents(rows, "seq_len", metrics=("memory",))
    assert len(fits) == 1
    return fits.iloc[0]


def test_a_real_native_path_is_confirmed_and_its_planted_n2_buffer_refuted():
    rows = _rows()
    clean = _memory_fit(rows)
    assert clean["claimed"] == 1.0 and clean["verdict"] == "confirmed", clean["why"]
    planted = _memory_fit(_planted(rows, 0.06))
    assert planted["verdict"] == "refuted", planted["why"]
    assert planted["reason"] == Reason.HIGHER.value and "n^2" in planted["why"] and "of the peak" in planted["why"]
    # under the rule's least share of the peak (the same as time's), the same buffer is not a refutation
    assert claim_rule.MIN_HIGHER_SHARE == 0.05
    assert _memory_fit(_planted(rows, 0.04))["verdict"] == "confirmed"


def test_the_verdict_table_shows_memory_beside_time():
    fits = exponents(_rows(), "seq_len", metrics=("time", "memory"))
    table = claims(fits)
    assert len(table) == 1
    row = table.iloc[0]
    assert row["memory_claimed"] == 1.0 and row["memory_verdict"] == "confirmed"
    assert row["memory_reason"] == Reason.CONFIRMED.value and "peak" in row["memory_terms"]


@pytest.mark.parametrize(
    "claim, grows, verdict, reason",
    [
        (2.0, 1.0, "confirmed", "below"),  # a dense claim met by a path that keeps O(n): within the claim
        (1.0, 1.0, "confirmed", "confirmed"),
        (1.0, 2.0, "refuted", "higher"),  # n² scores against a linear claim
        (1.5, 2.0, "refuted", "higher"),
    ],
)
def test_a_peak_is_judged_as_a_bound(claim, grows, verdict, reason):
    from suite.analyse import memory

    n = 256.0 * 2 ** np.arange(7)
    peak = pd.Series(4096 + 512 * n + 2 * n**grows, index=n)  # a floor, the output, the kept term
    result = memory.judge_series(peak, claim, bootstrap=0)
    assert (result.verdict, result.reason.reason) == (verdict, Reason(reason)), result.why


def test_too_few_lengths_say_so_rather_than_confirm():
    from suite.analyse import memory

    n = np.array([512.0, 2048.0, 8192.0])
    result = memory.judge_series(pd.Series(512 * n, index=n), 1.5, bootstrap=0)
    assert result.verdict == "inconclusive"


def test_no_memory_claim_for_a_decode_step_or_a_cross_case():
    from suite.analyse import memory

    row = pd.Series({memory.COLUMN: 1.0, "kv_len": np.nan, "valid_fraction": np.nan})
    assert memory.claimed(row) == 1.0
    assert memory.claimed(pd.Series({**row, "kv_len": 512})) is None
    assert memory.claimed(pd.Series({memory.COLUMN: np.nan, "kv_len": np.nan, "valid_fraction": np.nan})) is None
