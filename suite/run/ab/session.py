"""One interleaved A/B sweep of two sides on a grid's cases, start to table: what `suite ab` runs, and
what `history check --confirm` runs on the cases of a slowdown it found (suite.history.confirm)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pandas as pd

from suite.errors import UsageError
from suite.plan.grid import Grid
from suite.run.ab import checkouts as sides
from suite.run.ab import driver
from suite.store.rundir import RunDir


def design(grid: Grid, pairs: int | None, rounds: int | None) -> tuple[int, int]:
    """The sweep's process pairs and rounds: as asked, or the defaults (the grid's replicates, 6 pairs at
    least; 2 rounds: docs/performance.md, the power of suite ab); out of range, exit 2."""
    pairs = pairs or max(grid.settings.replicates, driver.MIN_DEFAULT_PAIRS)
    if not 2 <= pairs <= 64:
        raise UsageError(f"--pairs {pairs} (allowed: 2..64: the test needs two pairs at least)")
    rounds = driver.DEFAULT_ROUNDS if rounds is None else rounds
    if not 1 <= rounds <= 16:
        raise UsageError(f"--rounds {rounds} (allowed: 1..16)")
    return pairs, rounds


def measure(
    run: RunDir,
    grid: Grid,
    base: str | Path,
    new: str | Path,
    repo: Path,
    pairs: int,
    rounds: int,
    plugins: list[str],
    out=None,
) -> pd.DataFrame:
    """Check out `base` and `new` (a str: a commit-ish of `repo`; a Path: a folder the user named), time
    every case of `grid` A, B, B, A in `pairs` process pairs, write the sweep's folder `run` and return its
    blocks (suite.analyse.paired's frame). RuntimeError: a side's workers cannot start (nothing to judge)."""
    from suite.analyse import paired

    out = out or sys.stderr
    with sides.checked_out(base, new, repo) as (a, b):
        grid = dataclasses.replace(grid, settings=driver.resolved(grid.settings, (a, b)))
        driver.start(run, grid, a, b, pairs, rounds, plugins)
        print(
            f"ab {run.name}: {len(grid.cases)} cases × {pairs} process pairs × {rounds} × A,B,B,A; "
            f"A = {base} ({(a.commit or 'no commit')[:12]}), B = {new} ({(b.commit or 'no commit')[:12]})",
            file=out,
        )
        driver.sweep(
            list(grid.cases),
            a,
            b,
            grid.settings,
            plugins,
            pairs,
            run.path / RunDir.AB_JOURNAL,
            run.log_path,
            out=out,
            rounds=rounds,
        )
    lines, problems = run.ab_lines()
    for problem in problems:
        print(f"warning: {problem}", file=out)
    frame = paired.blocks(lines)
    run.write_ab_table(frame)
    return frame
