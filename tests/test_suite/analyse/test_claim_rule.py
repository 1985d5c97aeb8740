"""The claim's rule decides on structured reasons: its English is rendered in one place, and rewording it
changes no verdict, no reason and no adaptive length."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from suite.analyse import claim_rule
from suite.analyse.claim_rule import Note, Reason, Tells, Why
from suite.analyse.exponents import all_exponents
from suite.analyse.terms import machines
from suite.plan import grid as grids
from suite.run.settle import advance
from suite.store.rundir import RunDir

CARD = Path(__file__).resolve().parents[3] / "docs" / "runs" / "cpu-full"
SHAPE = "mode == 'fwd' and not causal and num_heads == 8 and head_dim == 64 and params == '{}'"


def _reworded(monkeypatch) -> None:
    """Every template and note says something else: what the rule decides must not change."""
    monkeypatch.setattr(claim_rule, "TEMPLATES", {r: f"<{i}>{{under}}" for i, r in enumerate(claim_rule.TEMPLATES)})
    monkeypatch.setattr(claim_rule, "NOTES", {n: f"<note {i}>" for i, n in enumerate(claim_rule.NOTES)})


def _card():
    run = RunDir(CARD)
    return run.read_table(), machines(run.env(), run.bandwidth())


def _steps(frame: pd.DataFrame, hosts: dict, series: list[tuple[str, str]]) -> list[tuple]:
    """Each series' ladder decision after every length it reached (3 lengths and up), under a roomy and a tight
    call budget: next, stop, fill, and the stop's text."""
    out = []
    for variant, impl in series:
        ladder = grids.parse(
            {"block": [{"variant": [variant], "impl": [impl], "seq_len": {"min": 256, "max": 262144}}]}, "t"
        ).ladders[0]
        rows = frame.query(f"variant == '{variant}' and impl == '{impl}' and {SHAPE}").sort_values("seq_len")
        for top in sorted(set(rows["seq_len"]))[2:]:
            for max_call_s in (1.5, 0.02):
                step = advance(
                    ladder,
                    rows[rows["seq_len"] <= top],
                    width=0.2,
                    max_call_s=max_call_s,
                    memory_gib=16.0,
                    hosts=hosts,
                    stretch_call_s=8.0 * max_call_s,
                )
                out.append((variant, impl, top, step.next, step.stop, step.fill, step.why))
    return out


def test_every_reason_and_note_has_its_english_and_renders_nested():
    assert set(claim_rule.TEMPLATES) == set(Reason) and set(claim_rule.NOTES) == set(Note)
    higher = Why(
        Reason.HIGHER, {"lead": "n^1", "need_p": 0.001, "higher": "n^2", "higher_p": 0.002, "share": 0.3, "top": 4096.0}
    )
    edge = Why(Reason.EDGE, {"level": "L3", "n_edge": 8192.0, "until": 65536.0}, higher).noted(Note.NO_PROBE)
    said = str(edge)
    assert said.startswith("a term n^2 above the claim's n^1 is needed") and "L3" in said and "gather probe" in said
    assert edge.tells is Tells.LONGER_LENGTHS and higher.tells is Tells.NOTHING


def test_a_ladder_that_fills_and_settles_does_so_reworded(monkeypatch):
    ladder = grids.parse(
        {"block": [{"variant": ["linear"], "impl": ["native"], "seq_len": {"min": 256, "max": 65536}}]}, "t"
    ).ladders[0]
    n = 256 * 2.0 ** np.arange(5)
    t = 1e-6 * n * np.exp(np.random.default_rng(0).normal(0, 0.01, len(n)))
    rows = pd.DataFrame(
        {"seq_len": n, "time_s": t, "claimed_exponent_n": 1.0, "reason": "", "peak_bytes": 1e3 * n, "status": "ok"}
    )
    budget = dict(width=0.2, max_call_s=10.0, memory_gib=16.0)
    first = advance(ladder, rows, **budget)
    _reworded(monkeypatch)
    again = advance(ladder, rows, **budget)
    assert (
        (first.stop, first.fill, first.next) == (again.stop, again.fill, again.next) == ("fill", (360, 728, 1448), None)
    )
    assert "degrees of freedom" in first.why and "degrees of freedom" not in again.why


@pytest.mark.slow
def test_rewording_every_message_changes_no_ladder_decision(monkeypatch):
    frame, hosts = _card()
    series = [
        ("full", "sdpa"),
        ("mha_fused", "native"),
        ("reformer", "native"),
        ("linear", "native"),
        ("sliding_window", "native"),
        ("fixed", "native"),
    ]
    before = _steps(frame, hosts, series)
    _reworded(monkeypatch)
    after = _steps(frame, hosts, series)
    assert [s[:6] for s in before] == [s[:6] for s in after]
    assert sum(b[6] != a[6] for b, a in zip(before, after)) > len(before) / 4, "the rewording reached the stops"
    assert {s[4] for s in before} >= {"time", "settled", "max"}, "the battery takes the ladder's stops"


@pytest.mark.slow
def test_rewording_every_message_changes_no_verdict_of_a_full_run(monkeypatch):
    frame, hosts = _card()
    keys = ["variant", "series", "axis", "metric", "verdict", "reason", "tells", "why_notes"]
    before = all_exponents(frame, hosts)
    _reworded(monkeypatch)
    after = all_exponents(frame, hosts)
    pd.testing.assert_frame_equal(before[keys], after[keys])
    assert not (before["why"] == after["why"]).any()
    assert set(before["reason"]) >= {"confirmed", "higher", "hidden", "freedom", "by_work", "within", "no_claim"}
