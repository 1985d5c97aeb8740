"""The histories the check's tests share."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def history(tmp_path_factory) -> Path:
    """14 quiet runs, then 3 in which full/sdpa is 20% slower and linear's exponent 0.3 steeper."""
    pytest.importorskip("duckdb", reason='the `history` extra: pip install -e ".[history]"')
    from history_runs import synthetic_run

    from suite.history import store

    db = tmp_path_factory.mktemp("history") / "h.duckdb"
    for i in range(17):
        slow = {"slower": {"full": 1.2}, "steeper": {"linear": 0.3}} if i >= 14 else {}
        store.add(db, synthetic_run(i, **slow))
    return db
