"""The glance table (suite.analyse.glance): every slice's verdict of a small stored run in one row per variant and
implementation, in the card and the report, each cell linking to its detail."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from suite.analyse import glance
from suite.present import card
from suite.store.rundir import RunDir

RUNS = Path(__file__).parents[3] / "docs" / "runs"


@pytest.fixture(scope="module")
def analysis():
    return card.analysis_of(RunDir(RUNS / "cpu-full"))


def test_every_fit_of_every_slice_has_its_verdict_in_its_cell(analysis):
    table = glance.glance(analysis.fits).set_index(glance.KEYS)
    for one in glance.SLICES:
        rows = glance.rows_of(analysis.fits, one)
        assert not rows.empty, one.name  # the stored run has a series in every slice
        for keys, group in rows.groupby(glance.KEYS):
            shown = table.loc[keys, one.name]
            worst = next(v for v in glance.ORDER if v in set(group["verdict"]))
            assert glance.verdict_of(shown) == worst, (one.name, keys, shown)
            assert (f"of {len(group)})" in shown) == (len(group) > 1), shown


def test_a_cell_is_refuted_where_any_series_is_and_counts_them():
    assert glance.cell(pd.Series(["confirmed", "refuted", "inconclusive"])) == "refuted (1 of 3)"
    assert glance.cell(pd.Series(["confirmed", "inconclusive"])) == "inconclusive (1 of 2)"
    assert glance.cell(pd.Series(["confirmed"])) == "confirmed"
    assert glance.cell(pd.Series([], dtype=object)) == ""


def test_the_card_shows_the_glance_table_coloured_and_linked_before_the_details(analysis):
    text = (RUNS / "cpu-full.md").read_text()
    assert text.index("## Every claim's verdict at a glance") < text.index("## Verdicts: the leading term")
    line = next(line for line in text.splitlines() if line.startswith("| sliding_window | sdpa | cpu/float32 | ["))
    cells = [c.strip() for c in line.strip("|").split("|")]
    named = dict(zip(["variant", "impl", "device", *(one.name for one in glance.SLICES)], cells))
    assert named["training time"] == "[🔴 refuted](#training-forward-and-backward-in-n)"
    assert named["causal time"] == "[🔴 refuted](#causal-in-n)"
    for anchor in card.ANCHORS.values():  # every link's heading is on the page
        heading = next((h for h in text.splitlines() if h.startswith("#") and _anchor(h) == anchor), None)
        assert heading is not None, anchor


def _anchor(heading: str) -> str:
    words = "".join(ch for ch in heading.lstrip("#").strip().lower() if ch.isalnum() or ch in " -_")
    return "-".join(words.split())
