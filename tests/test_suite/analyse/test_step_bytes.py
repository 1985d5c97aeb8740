"""A decode step judged on the bytes it reads (suite.analyse.step_bytes): planted on synthetic rows as the analysis
reads them, a step that rescans its cache where its claim says a running state is refuted, even over a span too
short for the time's own rule, and its clean twin is confirmed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from helpers import synthetic_rows

from suite.analyse import exponents
from suite.analyse.claim_rule import Reason
from suite.analyse.terms import machines

RUN = Path(__file__).parents[3] / "docs" / "runs" / "cpu-full"
H, D, STEP_S = 16, 64, 20e-6
STATE = 2 * H * (D * D + D) * 4 + 4 * H * D * 4  # S and z read and written, q, k, v and the output


def _hosts() -> dict:
    return machines(json.loads((RUN / "env.json").read_text()), json.loads((RUN / "bandwidth.json").read_text()))


def _rows(impl: str, lengths, rescans: bool, rate: float, claim_bytes=None, claimed=0.0) -> list[dict]:
    noise = np.random.default_rng(1).standard_normal(len(lengths))
    cache = {n: 2 * H * n * D * 4 for n in lengths}  # K and V, float32
    times = {n: STEP_S * (1 + 0.02 * e) + (cache[n] / rate if rescans else 0.0) for n, e in zip(lengths, noise)}
    rows = synthetic_rows("linear", impl, times, claimed=claimed, mode="decode", num_heads=H, num_kv_heads=H)
    for row in rows:
        row["flops"] = row["flops_counted"] = 4 * H * D * D  # the step's, whatever n: the work cannot tell
        row["compulsory_bytes"] = claim_bytes(row["seq_len"]) if claim_bytes else STATE
    return rows


def _decode_fits(rows: list[dict]) -> pd.DataFrame:
    fits = exponents.all_exponents(pd.DataFrame(rows), _hosts())
    return fits[(fits["metric"] == "time") & (fits["axis"] == "seq_len")].set_index("impl")


def test_a_step_that_rescans_its_cache_is_refuted_by_its_bytes_where_its_time_alone_is_open():
    """Over 1024-8192 (8x: the time's rule needs 16x) a step whose time rises by what reading its K and V takes
    is refuted by its bytes; the twin that reads its state alone is not."""
    rate = _hosts()["cpu"]["bytes_per_s"]
    short = [1024, 2048, 4096, 8192]
    fits = _decode_fits(_rows("dense", short, True, rate) + _rows("native", short, False, rate))
    assert fits.loc["dense", "power_verdict"] != "refuted"
    assert fits.loc["dense", "verdict"] == "refuted" and fits.loc["dense", "reason"] == Reason.BY_BYTES.value
    assert fits.loc["dense", "bytes_reason"] == Reason.BYTES_CACHE.value
    assert fits.loc["native", "verdict"] != "refuted" and fits.loc["native", "bytes_verdict"] == "confirmed"


def test_the_clean_step_is_confirmed_and_the_rescan_refuted_over_the_grids_lengths():
    rate = _hosts()["cpu"]["bytes_per_s"]
    lengths = [1024 * 2**i for i in range(7)]
    fits = _decode_fits(_rows("dense", lengths, True, rate) + _rows("native", lengths, False, rate))
    assert fits.loc["native", "verdict"] == "confirmed" and fits.loc["native", "bytes_verdict"] == "confirmed"
    assert fits.loc["dense", "verdict"] == "refuted" and fits.loc["dense", "bytes_verdict"] == "refuted"


def test_a_step_whose_claim_reads_its_cache_is_not_refuted_by_reading_it():
    """Full attention's step claims its whole row: reading the cache is its claim's bytes."""
    rate = _hosts()["cpu"]["bytes_per_s"]
    lengths = [1024 * 2**i for i in range(7)]
    fits = _decode_fits(_rows("sdpa", lengths, True, rate, claim_bytes=lambda n: 2 * H * n * D * 4, claimed=1.0))
    assert fits.loc["sdpa", "bytes_verdict"] == "confirmed" and fits.loc["sdpa", "reason"] != Reason.BY_BYTES.value


@pytest.mark.parametrize("bandwidth", [None, {}])
def test_without_a_bandwidth_probe_nothing_is_said_of_bytes(bandwidth):
    env = json.loads((RUN / "env.json").read_text())
    rows = _rows("dense", [1024, 2048, 4096, 8192], True, 38e9)
    fits = exponents.all_exponents(pd.DataFrame(rows), machines(env, bandwidth))
    time = fits[(fits["metric"] == "time") & (fits["axis"] == "seq_len")]
    assert time["bytes_verdict"].isna().all() and (time["verdict"] != "refuted").all()
