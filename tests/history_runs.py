"""Synthetic runs for the history tests: run folders as `suite run` writes them, and histories of them.

Times follow c·nᵖ with a seeded 2% noise, so a planted step is the only change in a series.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
from pathlib import Path

import numpy as np
import pandas as pd

from suite.history import points
from suite.history.store import Run
from suite.plan.case import Case
from suite.store import table
from suite.store.row import Row
from suite.store.rundir import RunDir

LENGTHS = (256, 512, 1024, 2048)
SERIES = {("full", "sdpa"): (2.0, 1e-9), ("linear", "native"): (1.0, 1e-6)}  # (exponent, c)


def cases(series: dict = SERIES, lengths=LENGTHS, heads: int = 2, head_dim: int = 16) -> list[Case]:
    return [
        Case(variant, impl, "cpu", "float32", "fwd", 1, n, heads, heads, head_dim, False)
        for variant, impl in series
        for n in lengths
    ]


def rows(
    seed: int,
    slower: dict | None = None,
    steeper: dict | None = None,
    finished_at: float = 1.8e9,
    missing: int = 0,
    made_of: tuple[list[Case], dict] | None = None,
) -> list[Row]:
    """One Row per case (the last `missing` cases left out): `slower` {variant: factor} multiplies a
    variant's times ({(variant, n): factor} its times at length n), `steeper` {variant: dp} adds to its exponent; `made_of`: (the cases, their SERIES)
    in place of this module's."""
    rng = np.random.default_rng(seed)
    out = []
    chosen, series = made_of or (cases(), SERIES)
    for case in chosen[: len(chosen) - missing]:
        p, c = series[(case.variant, case.impl)]
        p += (steeper or {}).get(case.variant, 0.0)
        factor = (slower or {}).get((case.variant, case.seq_len), (slower or {}).get(case.variant, 1.0))
        t = c * case.seq_len**p * factor * float(np.exp(rng.normal(0, 0.02)))
        samples = list(t * np.exp(rng.normal(0, 0.01, 8)))
        claim = series[(case.variant, case.impl)][0]
        out.append(Row(case, finished_at=finished_at, replicates=1, claimed_exponent_n=claim).with_samples(samples))
    return out


def run_folder(
    results: Path, name: str, commit: str, fingerprint: str = "fp0000000001", seed: int = 0, missing: int = 0, **kw
) -> Path:
    """A run folder: plan.json, env.json, journal.jsonl and the table built from it."""
    run = RunDir(results / name)
    run.path.mkdir(parents=True)
    run.write_json(RunDir.PLAN, {"grid": "synthetic", "cases": [c.key for c in cases()], "settings": {}})
    run.write_json(RunDir.ENV, {"fingerprint_id": fingerprint, "git_commit": commit, "torch": "2.13.0"})
    made = rows(seed, missing=missing, **kw)
    for row in made:
        run.journal.append(row)
    run.write_table(table.table(cases(), made))
    return run.path


def commit_of(i: int) -> str:
    return hashlib.sha1(f"commit {i}".encode()).hexdigest()


def synthetic_run(i: int, fingerprint: str = "fp0000000001", commit: str | None = None, **kw) -> Run:
    """The i-th run of a history (commit i unless `commit`, a day apart), built in memory (`kw`: as `rows`).
    A plain run (no `kw`) is made once per test session and handed out with its tables copied (a run's fits and
    the medians' intervals are its cost, and the history's fast tests ask for the same few plain runs many times)."""
    if kw:
        return _made(i, fingerprint, commit, **kw)
    run = _plain(i, fingerprint, commit)
    return dataclasses.replace(run, cases=run.cases.copy(), exponents=run.exponents.copy())


@functools.cache
def _plain(i: int, fingerprint: str, commit: str | None) -> Run:
    return _made(i, fingerprint, commit)


def _made(i: int, fingerprint: str, commit: str | None, **kw) -> Run:
    frame = table.table(
        kw["made_of"][0] if kw.get("made_of") else cases(), rows(i, finished_at=1.8e9 + 86400 * i, **kw)
    )
    commit = commit or commit_of(i)
    return Run(
        run_key=f"run{i:05d}",
        fingerprint_id=fingerprint,
        git_commit=commit,
        commit_time=pd.Timestamp(1.8e9 + 86400 * i - 3600, unit="s", tz="UTC"),
        run_time=pd.Timestamp(1.8e9 + 86400 * i, unit="s", tz="UTC"),
        run_name=f"nightly-{i}",
        grid="synthetic",
        env=json.dumps({"fingerprint_id": fingerprint}),
        cases=points.case_points(frame),
        exponents=points.exponent_points(frame),
    )
