"""Every case's time and every series' exponent in a history, judged: change points and the tail's class.

Pure: the store's frames in (suite.history.store.read), tables out; nothing here knows of files or the
database. A case's series is its `METRIC` over the runs, in commit-then-run order, of the runs where it
measured `ok`, each point divided by its run's level (suite.history.level: the median shift of the
run's cases of other series; a run with too few cases has none, and its points are judged raw); the
level itself is judged as a series of its own (kind `level`, key HOST), and each series' lengths
together as one more (kind TOGETHER, `together`); each series' newest nights are judged as one step
too (suite.history.steps, `stepped`): each case it slowed a regression, rule `step`. A series' exponent is its
fitted time exponent in n over the runs where it was fitted, not adjusted (an exponent is a ratio
within a run: docs/history.md measured no common shift to remove). Only the newest WINDOW points are
judged (a nightly history grows without end).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from suite.history import level as levels
from suite.history import steps
from suite.history.changes import RECENT, judged

# the fastest call, as the exponent fits use: on the steady history grid its run-to-run robust spread was
# 2.4% against the median's 8.5% (docs/history.md: which time a history judges)
METRIC = "time_min_s"
WINDOW = 120
HOST = "host level"  # the key and series of the host's level
TOGETHER = "lengths"  # the kind of a series' lengths judged together (`together`)
TOGETHER_LENGTHS = 3
SEVERITY = {"regression": 0, "suspicious": 1, "improvement": 2, "no change": 3, "insufficient data": 4}
VERDICT_COLUMNS = [
    "kind",
    "key",
    "series_key",
    "series",
    "label",
    "seq_len",
    "points",
    "class",
    "changes",
    "newest",
    "newest_commit",
    "claimed",
]
CHANGE_COLUMNS = [
    "kind",
    "key",
    "series_key",
    "series",
    "label",
    "seq_len",
    "class",
    "before_run",
    "after_run",
    "before_commit",
    "after_commit",
    "commits",
    "size",
    "lo",
    "hi",
    "slower",
    "newest",
    "rule",
    "lengths",
]


@dataclass
class Judged:
    verdicts: pd.DataFrame  # one row per case (kind time), per series (kinds TOGETHER and exponent), the host (level)
    changes: pd.DataFrame  # one row per change point
    points: pd.DataFrame  # the judged points of every case and series: `value`, and `run`, its run's position
    runs: pd.DataFrame  # every run of the history in order, with its `position`, its `level` (the host's, NaN
    # where it has too few cases: its points judged raw) and `cases` (its ok cases)
    rule: Rule | None = None  # what the cases' times were judged against


def commit_range(before: str, after: str) -> str:
    """Where a change came in: `git log BEFORE..AFTER` lists the commits that may have made it."""
    if before == after:
        return f"{after[:10]} (no commit between: the machine or the environment)"
    return f"{before[:10]}..{after[:10]}"


def _one(kind: str, key: str, rows: pd.DataFrame, column: str, screen: bool = False) -> tuple[dict, list[dict]]:
    """`screen`: a case's and a series' lengths' times are screened too (changes.screen_change: `check
    --confirm` measures its slowdown again); the screen's change joins the rows, not the class."""
    rows = rows.tail(WINDOW)
    changes, status = judged(
        rows[column].to_numpy(float),
        "exponent" if kind == "exponent" else "time",
        tail=kind != "time",  # one case's odd nights come too often for the tail's rule
        screen=screen and kind in ("time", TOGETHER),
    )
    first = rows.iloc[-1]
    commits = rows["git_commit"].tolist()
    base = {
        "kind": kind,
        "key": key,
        "series_key": first["series_key"],
        "series": first["series"],
        "label": first["series"] if kind == "exponent" else first["label"],
        "seq_len": first["seq_len"] if kind == "time" else np.nan,
    }
    verdict = {
        **base,
        "points": len(rows),
        "class": status,
        "changes": len(changes),
        "newest": first[column],
        "newest_commit": first["git_commit"],
        "claimed": first["claimed"] if kind == "exponent" else np.nan,
    }
    runs = rows["run"].tolist()
    found = [
        {
            **base,
            "class": status,
            "before_run": runs[c.before],
            "after_run": runs[c.after],
            "before_commit": commits[c.before],
            "after_commit": commits[c.after],
            "commits": commit_range(commits[c.before], commits[c.after]),
            "size": c.size,
            "lo": c.lo,
            "hi": c.hi,
            "slower": c.slower,
            "newest": i == len(changes) - 1,
            "rule": c.rule,
        }
        for i, c in enumerate(changes)
    ]
    return verdict, found


@dataclass(frozen=True)
class Rule:
    """What each case's time was judged against: `level` (its run's) or `raw`, and why."""

    against: str  # "level" or "raw"
    asked: str  # "auto", "level" or "raw"
    spread_raw: float  # the median over the cases of each one's robust sd, in log: raw
    spread_level: float  # the same against the level (NaN: no run has a level)
    raw_runs: int  # runs without a level (too few cases): their points judged raw


def leveled(ok: pd.DataFrame, count: int, against: str = "auto") -> tuple[pd.DataFrame, np.ndarray, Rule]:
    """`ok` with each point's `level` (its run's, in log; NaN: judged raw) and `value` (METRIC at the
    history's usual level), the host's level of each of `count` runs (log; NaN: too few cases), and the
    rule: `against` level, raw, or auto (the level where the cases' series spread less against it)."""
    if against not in ("auto", "level", "raw"):
        raise ValueError(f"against {against!r} (allowed: auto, level, raw)")
    if ok.empty:
        return (
            ok.assign(level=np.nan, value=ok[METRIC]),
            np.full(count, np.nan),
            Rule("raw", against, np.nan, np.nan, count),
        )
    logs = ok.pivot_table(index="case_id", columns="run", values=METRIC, aggfunc="first").reindex(columns=range(count))
    logs = np.log(logs.astype(float))
    series = ok.groupby("case_id")["series_key"].first().reindex(logs.index)
    own, host = levels.levels(logs.to_numpy(), series.to_numpy())
    helps, spread_raw, spread_level = levels.quieter(logs.to_numpy(), own)
    use = not np.isnan(spread_level) and (against == "level" or (against == "auto" and helps))
    runs_without = int(np.isnan(host).sum())
    rule = Rule("level" if use else "raw", against, spread_raw, spread_level, runs_without)
    where = {case: i for i, case in enumerate(logs.index)}
    level = own[ok["case_id"].map(where).to_numpy(), ok["run"].to_numpy()] if use else np.full(len(ok), np.nan)
    return ok.assign(level=level, value=ok[METRIC] * np.exp(-np.nan_to_num(level))), host, rule


def _host(runs: pd.DataFrame) -> pd.DataFrame:
    """The host's level as a series' points: `value` the ratio exp(level), in the runs where it is defined."""
    rows = runs.dropna(subset=["level"])
    return rows.assign(
        series_key=HOST,
        series=HOST,
        label=f"{HOST} (every case at once)",
        seq_len=np.nan,
        claimed=np.nan,
        run=rows["position"],
        value=np.exp(rows["level"]),
    )


def together(ok: pd.DataFrame) -> pd.DataFrame:
    """Each series' lengths judged together, as points: in each run, the median over the series' cases of
    each one's log time less its own median over those runs; `value` the ratio exp(that). A commit acts on
    a series, at every length at once, where a case's own slow night moves the median of its lengths
    little. The cases are the series' in its newest run, the runs those that hold every one of them (so a
    grid that changed its lengths, or a run where one failed, is no step), and TOGETHER_LENGTHS of them at
    least: a median of two is moved by one case alone."""
    parts = [_together(rows) for _, rows in ok.groupby("series_key", sort=False)]
    parts = [part for part in parts if not part.empty]
    return pd.concat(parts, ignore_index=True) if parts else ok.iloc[0:0]


def _together(rows: pd.DataFrame) -> pd.DataFrame:
    newest = set(rows.loc[rows["run"] == rows["run"].max(), "case_id"])
    if len(newest) < TOGETHER_LENGTHS:
        return rows.iloc[0:0]
    rows = rows[rows["case_id"].isin(newest)]
    held = rows.groupby("run")["case_id"].nunique()
    rows = rows[rows["run"].isin(held[held == len(newest)].index)]
    logs = np.log(rows["value"].astype(float))
    rows = rows.assign(dev=logs - logs.groupby(rows["case_id"]).transform("median"))
    out = rows.groupby("run", as_index=False, sort=True).agg(
        series_key=("series_key", "first"),
        series=("series", "first"),
        git_commit=("git_commit", "first"),
        dev=("dev", "median"),
    )
    return out.assign(
        label=out["series"] + " (its lengths together)", seq_len=np.nan, claimed=np.nan, value=np.exp(out["dev"])
    )


def _step_rows(rows: pd.DataFrame) -> list[dict]:
    """One series' step (suite.history.steps) as change rows: each case it slowed; [] where none."""
    newest = set(rows.loc[rows["run"] == rows["run"].max(), "case_id"])
    wide = (
        rows[rows["case_id"].isin(newest)]
        .pivot_table(index="case_id", columns="run", values="value", aggfunc="first")
        .dropna(axis=1)
        .iloc[:, -WINDOW:]
    )
    found = steps.series_step(np.log(wide.to_numpy(float)))
    if found is None or found.after < wide.shape[1] - RECENT:
        return []
    runs = wide.columns.tolist()
    commits = rows.groupby("run")["git_commit"].first()
    before, after = runs[found.before], runs[found.after]
    first = rows.drop_duplicates("case_id").set_index("case_id")
    lengths = ", ".join(str(int(n)) for n in sorted(first.loc[wide.index, "seq_len"]))
    return [
        {
            "kind": "time",
            "key": case,
            "series_key": first.loc[case, "series_key"],
            "series": first.loc[case, "series"],
            "label": first.loc[case, "label"],
            "seq_len": first.loc[case, "seq_len"],
            "class": "regression",
            "before_run": before,
            "after_run": after,
            "before_commit": commits[before],
            "after_commit": commits[after],
            "commits": commit_range(commits[before], commits[after]),
            "size": found.sizes[i],
            "lo": np.nan,
            "hi": np.nan,
            "slower": True,
            "newest": True,
            "rule": "step",
            "lengths": lengths,
        }
        for i, case in enumerate(wide.index)
        if i in found.cases
    ]


def stepped(ok: pd.DataFrame, verdicts: pd.DataFrame, found: list[dict]) -> tuple[pd.DataFrame, list[dict]]:
    """The verdicts and change rows with each series' step at its newest nights (`_step_rows`): a case it
    slowed is a regression, where its own rules did not already call one."""
    called = {row["key"] for row in found if row["kind"] == "time" and row["class"] == "regression" and row["newest"]}
    for _, rows in ok.groupby("series_key", sort=False):
        for row in _step_rows(rows):
            if row["key"] in called:
                continue
            found.append(row)
            mine = (verdicts["kind"] == "time") & (verdicts["key"] == row["key"])
            verdicts.loc[mine, "changes"] += 1
            verdicts.loc[mine, "class"] = "regression"
    return verdicts, found


def judge(
    runs: pd.DataFrame, cases: pd.DataFrame, exponents: pd.DataFrame, against: str = "auto", screen: bool = False
) -> Judged:
    """Change points and classes of every case's time (against its run's level, or raw: `against`, see
    `leveled`), the host's level and every series' exponent (the store's frames); `screen`: the times'
    screened slowdowns too (`_one`), for `check --confirm` to re-measure."""
    runs = runs.reset_index(drop=True).assign(position=lambda r: np.arange(len(r)))
    where = dict(zip(runs["run_key"], runs["position"]))
    ok = cases[(cases["status"] == "ok") & (cases[METRIC] > 0)].assign(run=lambda c: c["run_key"].map(where))
    ok, host, rule = leveled(ok, len(runs), against)
    runs = runs.assign(
        level=host, cases=ok.groupby("run").size().reindex(runs["position"]).fillna(0).astype(int).to_numpy()
    )
    fitted = exponents.dropna(subset=["slope"]).assign(run=lambda e: e["run_key"].map(where))
    verdicts, changes, points = [], [], []
    for kind, frame, key, column in (
        ("time", ok, "case_id", "value"),
        (TOGETHER, together(ok), "series_key", "value"),
        ("level", _host(runs), "series_key", "value"),
        ("exponent", fitted, "series_key", "slope"),
    ):
        if frame.empty:
            continue
        for name, rows in frame.sort_values("run").groupby(key, sort=False):
            verdict, found = _one(kind, name, rows, column, screen)
            verdicts.append(verdict)
            changes += found
            points.append(rows.tail(WINDOW).assign(kind=kind, key=name, value=rows.tail(WINDOW)[column].to_numpy()))
    table = pd.DataFrame(verdicts, columns=VERDICT_COLUMNS)
    table, changes = stepped(ok, table, changes)
    table = table.assign(order=table["class"].map(SEVERITY)).sort_values(["order", "series", "kind", "seq_len"])
    return Judged(
        table.drop(columns="order").reset_index(drop=True),
        pd.DataFrame(changes, columns=CHANGE_COLUMNS),
        pd.concat(points, ignore_index=True) if points else pd.DataFrame(),
        runs,
        rule,
    )
