"""A run folder as a point of history: its identity and its points, or a UsageError saying why not.

Refused, before anything is written: a run being measured now (its folder's lock is held), a run that
is not finished (a case `killed` or `not_run`, which `run --resume` measures again: suite.store.row.FINISHED
lists the statuses that end a case), a run measured with uncommitted changes
(its commit does not say what was measured), a run without a fingerprint or commit, a commit the
repository does not know (unless its time is given). The run's time is when its last case finished
(the journal's `finished_at`; a folder without a journal: its table's time); a `finished_at` that is no
time (NaN, infinite, negative, past 2100, text) is refused with its line. Nothing in the folder is
written or executed, except a stale table rebuilt from the journal as `report` does.
"""

from __future__ import annotations

import hashlib
import numbers
import re
import subprocess
from datetime import datetime
from pathlib import Path

import pandas as pd

from suite.analyse.terms import machines
from suite.errors import UsageError, check_name
from suite.history.points import case_points, exponent_points
from suite.history.store import Run
from suite.store import lock
from suite.store.journal import Journal
from suite.store.row import FINISHED
from suite.store.rundir import RunDir

COMMIT = re.compile(r"[0-9a-f]{7,64}")


def folder_of(ref: str, results_dir: Path) -> Path:
    """The folder `ref` names (a folder, or a run name under results_dir); UsageError naming the runs there."""
    if not ref.strip():
        raise UsageError(f"run {ref!r} (allowed: a run's name under {results_dir}/ or its folder)")
    if Path(ref).is_dir():
        return Path(ref).resolve()
    folder = Path(results_dir) / check_name("run", ref)
    if not folder.is_dir():
        known = sorted(p.parent.name for p in Path(results_dir).glob(f"*/{RunDir.PLAN}"))
        raise UsageError(f"run {ref!r}: no folder {folder} (runs in {results_dir}/: {', '.join(known) or 'none'})")
    return folder


def load(ref: str, results_dir: Path, repo: Path, commit_time: str | None = None) -> Run:
    folder = folder_of(ref, results_dir)
    with lock.reading(folder, "history add"):
        return _loaded(ref, folder, results_dir, repo, commit_time)


def _loaded(ref: str, folder: Path, results_dir: Path, repo: Path, commit_time: str | None) -> Run:
    """The run in `folder` as a point of history (its lock held shared by the caller)."""
    env = RunDir(folder).env()  # NB: the identity first: a run refused for it is not touched
    fingerprint = check_name(f"{folder / RunDir.ENV} fingerprint_id", env.get("fingerprint_id"))
    commit = env.get("git_commit")
    if not isinstance(commit, str) or commit.endswith("-dirty") or not COMMIT.fullmatch(commit):
        raise UsageError(
            f"history add {ref}: {folder / RunDir.ENV} git_commit = {commit!r} (allowed: a clean "
            "commit's hash; a run with uncommitted changes does not say what was measured)"
        )
    when = _commit_time(commit, repo) if commit_time is None else _timestamp("--commit-time", commit_time)
    run = RunDir.resolve(str(folder), Path(results_dir))
    frame = run.read_table()
    left = unfinished(frame)
    if left:
        counts = ", ".join(f"{n} of {len(frame)} cases {status}" for status, n in left.items())
        raise UsageError(
            f"history add {ref}: the run is not finished: {counts} "
            f"(allowed: every case one of {', '.join(FINISHED)}; python -m suite run --resume "
            f"{run.name} measures the others)"
        )
    finished = _run_time(run)
    key = hashlib.sha1(f"{fingerprint}\n{commit}\n{run.name}\n{finished.isoformat()}".encode()).hexdigest()[:16]
    return Run(
        run_key=key,
        fingerprint_id=fingerprint,
        git_commit=commit,
        commit_time=when,
        run_time=finished,
        run_name=run.name,
        grid=str(run.plan().get("grid", "")),
        env=run.file(RunDir.ENV).read_text(),
        cases=case_points(frame),
        exponents=exponent_points(frame, machines(env, run.bandwidth())),
    )


def unfinished(frame: pd.DataFrame) -> dict[str, int]:
    """{status: count} of a run's cases that are not finished (suite.store.row.FINISHED: `killed`, `not_run`,
    anything unknown), in table order; empty for a run whose every case has ended."""
    return frame.loc[~frame["status"].isin(FINISHED), "status"].astype(str).value_counts(sort=False).to_dict()


def _timestamp(field: str, text: str) -> pd.Timestamp:
    try:
        stamp = pd.Timestamp(datetime.fromisoformat(text))  # NB: ISO 8601 only: pandas alone reads "now", "5/6/2026"
    except (ValueError, TypeError, OverflowError):
        stamp = None
    if stamp is None or pd.isna(stamp):
        raise UsageError(f"{field} {text!r} (allowed: an ISO 8601 time, e.g. 2026-11-27T04:00:00+00:00)")
    return stamp.tz_localize("UTC") if stamp.tzinfo is None else stamp.tz_convert("UTC")


def _commit_time(commit: str, repo: Path) -> pd.Timestamp:
    if not Path(repo).is_dir():
        raise UsageError(
            f"--repo {str(repo)!r}: no such folder (allowed: the git repository of the run's commit, "
            "or give the commit's time with --commit-time)"
        )
    out = subprocess.run(["git", "show", "-s", "--format=%cI", commit], cwd=repo, capture_output=True, text=True)
    if out.returncode != 0 or not out.stdout.strip():
        raise UsageError(
            f"commit {commit[:12]}: not in the repository {repo} (allowed: a commit `git show` finds "
            "there: fetch it, give --repo, or give its time with --commit-time)"
        )
    return _timestamp("commit time", out.stdout.strip())


def _run_time(run: RunDir) -> pd.Timestamp:
    journal = run.file(RunDir.JOURNAL)
    lines, _ = Journal(journal).lines() if journal.is_file() else ([], [])
    times = [
        _finished_at(journal, number, data["finished_at"])
        for number, data in lines
        if data.get("finished_at") is not None
    ]
    seconds = max(times) if times else run.file(RunDir.PARQUET).stat().st_mtime
    return pd.Timestamp(seconds, unit="s", tz="UTC").floor("us")


LATEST = 4102444800  # 2100-01-01 in seconds since 1970: later than any run, inside pandas' and DuckDB's times


def _finished_at(journal: Path, number: int, value) -> float:
    """A journal line's finished_at as seconds since 1970; UsageError for a value that is no such time
    (NaN, infinite, negative, past 2100, text, a boolean: a damaged line, which would set the run's time)."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool) and 0 <= value < LATEST:
        return float(value)
    raise UsageError(
        f"history add: {journal} line {number} finished_at = {str(value)[:40]!r} (allowed: a finite "
        "time in seconds since 1970, before 2100, as `suite run` writes it; mend or drop the line)"
    )
