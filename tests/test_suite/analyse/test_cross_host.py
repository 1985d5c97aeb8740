"""The verdicts of the stored full runs of current code agree with one another: the same answer on every host,
since the cost model judges the algorithm's leading term and leaves the machine's caches to their steps.

The stored full runs are the run cards' runs of the `full` grid (docs/runs/NAME/, with plan.json's grid `full`:
the results table, env.json with the host's caches, bandwidth.json), each re-analysed here by the current code
(suite.analyse.verdicts, as its report reads them). Every pair is held to the same rules; none is excused."""

from __future__ import annotations

import itertools
import json
import multiprocessing
import os
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pandas as pd
import pytest

from suite import analyse
from suite.store.rundir import RunDir

pytestmark = pytest.mark.slow  # every stored full run's verdicts are computed afresh

ROOT = Path(__file__).resolve().parents[3]
CARDS = ROOT / "docs" / "runs"
RUNS = sorted(
    plan.parent
    for plan in CARDS.glob("*/plan.json")
    if json.loads(plan.read_text()).get("grid") == "full" and (plan.parent / "results.parquet").is_file()
)
AGREE = 0.95  # the share of shared series two full runs must give the same verdict
SHARED = 0.9  # the share of each run's series the two must both hold, so that agreement is over most of each


def verdicts(folder: Path) -> pd.Series:
    """A stored run's verdicts, as its report reads them (suite.analyse.verdicts: the claims table, without the
    report's other tables)."""
    run = RunDir(folder)
    table = analyse.verdicts(run.read_table(), bandwidth=run.bandwidth(), env=run.env())
    return table.set_index(["variant", "series", "device", "dtype"])["verdict"]


@pytest.fixture(scope="module")
def stored() -> dict[str, pd.Series]:
    """Each run in its own process, as many at once as the machine has cores."""
    with ProcessPoolExecutor(
        max(1, min(len(RUNS), len(os.sched_getaffinity(0)))), mp_context=multiprocessing.get_context("spawn")
    ) as pool:
        return dict(zip((folder.name for folder in RUNS), pool.map(verdicts, RUNS)))


def test_the_cards_hold_full_runs_of_two_host_kinds_to_compare():
    """Agreement across hosts needs at least two full runs, on different CPUs."""
    models = {RunDir(folder).env().get("cpu_model") for folder in RUNS}
    assert len(RUNS) >= 2 and len(models) >= 2, f"full runs among the cards: {[p.name for p in RUNS]} ({models})"


PAIRS = list(itertools.combinations([p.name for p in RUNS], 2))


def _shared(stored, a, b) -> pd.Index:
    both = stored[a].index.intersection(stored[b].index)
    assert len(both) >= SHARED * max(len(stored[a]), len(stored[b])), (
        f"{a} ({len(stored[a])} series) and {b} ({len(stored[b])}) share only {len(both)}"
    )
    return both


@pytest.mark.parametrize("a,b", PAIRS)
def test_two_full_runs_agree_on_their_verdicts(stored, a, b):
    both = _shared(stored, a, b)
    same = stored[a][both] == stored[b][both]
    differ = sorted(f"{k}: {stored[a][k]} / {stored[b][k]}" for k in both[~same.to_numpy()])
    assert same.mean() >= AGREE, f"{a} and {b} agree on {same.sum()} of {len(both)}: " + "; ".join(differ)


@pytest.mark.parametrize("a,b", PAIRS)
def test_no_series_is_confirmed_in_one_run_and_refuted_in_another(stored, a, b):
    """A verdict may be settled in one run and not the other, never reversed."""
    contrary = [k for k in _shared(stored, a, b) if {stored[a][k], stored[b][k]} == {"confirmed", "refuted"}]
    assert contrary == [], f"confirmed in one run and refuted in the other: {contrary}"


def _native(table: pd.Series) -> pd.Series:
    """The native paths' series at their default options (a series named `native`, not `native (block=16)`)."""
    return table[[series.startswith("native") and "(" not in series for _, series, _, _ in table.index]]


@pytest.mark.parametrize("name", [p.name for p in RUNS])
def test_no_stored_full_run_refutes_a_native_path_whose_work_grows_as_claimed(stored, name):
    """Each native path's work grows as its claim says (variants' own operation counts): a refutation of one is
    the model misreading a machine effect, whichever series and host it is."""
    native = _native(stored[name])
    assert len(native) >= 10, f"{name}: {len(native)} native series (the filter no longer finds them)"
    refuted = native[native == "refuted"]
    assert refuted.empty, f"{name}: {list(refuted.index)}"
