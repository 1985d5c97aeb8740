"""Every case's time and every series' exponent in a history, judged: change points and the tail's class.

Pure: the store's frames in (suite.history.store.read), tables out; nothing here knows of files or the
database. A case's series is its `METRIC` over the runs, in commit-then-run order, of the runs where it
measured `ok`; a series' exponent is its fitted time exponent in n over the runs where it was fitted.
Only the newest WINDOW points are judged (a nightly history grows without end).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from suite.history.changes import Change, change_points, classify

METRIC = "time_s"  # the median time: the figure a run reports (docs/history.md: why not the fastest call)
WINDOW = 120
SEVERITY = {"regression": 0, "suspicious": 1, "improvement": 2, "no change": 3, "insufficient data": 4}
VERDICT_COLUMNS = ["kind", "key", "series_key", "series", "label", "seq_len", "points", "class", "changes",
                   "newest", "newest_commit", "claimed"]
CHANGE_COLUMNS = ["kind", "key", "series_key", "series", "label", "seq_len", "class", "before_run", "after_run",
                  "before_commit", "after_commit", "commits", "size", "lo", "hi", "slower", "newest"]


@dataclass
class Judged:
    verdicts: pd.DataFrame  # one row per case (kind time) and per series (kind exponent)
    changes: pd.DataFrame  # one row per change point
    points: pd.DataFrame  # the judged points of every case and series: `value`, and `run`, its run's position
    runs: pd.DataFrame  # every run of the history in order, with its `position`


def commit_range(before: str, after: str) -> str:
    """Where a change came in: `git log BEFORE..AFTER` lists the commits that may have made it."""
    if before == after:
        return f"{after[:10]} (no commit between: the machine or the environment)"
    return f"{before[:10]}..{after[:10]}"


def _one(kind: str, key: str, rows: pd.DataFrame, column: str) -> tuple[dict, list[dict]]:
    rows = rows.tail(WINDOW)
    changes: list[Change] = change_points(rows[column].to_numpy(float), kind)
    status = classify(len(rows), changes)
    first = rows.iloc[-1]
    commits = rows["git_commit"].tolist()
    base = {"kind": kind, "key": key, "series_key": first["series_key"], "series": first["series"],
            "label": first["label"] if kind == "time" else first["series"],
            "seq_len": first["seq_len"] if kind == "time" else np.nan}
    verdict = {**base, "points": len(rows), "class": status, "changes": len(changes), "newest": first[column],
               "newest_commit": first["git_commit"], "claimed": first["claimed"] if kind == "exponent" else np.nan}
    runs = rows["run"].tolist()
    found = [{**base, "class": status, "before_run": runs[c.before], "after_run": runs[c.after],
              "before_commit": commits[c.before],
              "after_commit": commits[c.after], "commits": commit_range(commits[c.before], commits[c.after]),
              "size": c.size, "lo": c.lo, "hi": c.hi, "slower": c.slower, "newest": i == len(changes) - 1}
             for i, c in enumerate(changes)]
    return verdict, found


def judge(runs: pd.DataFrame, cases: pd.DataFrame, exponents: pd.DataFrame) -> Judged:
    """Change points and classes of every case's time and every series' exponent (the store's frames)."""
    runs = runs.reset_index(drop=True).assign(position=lambda r: np.arange(len(r)))
    where = dict(zip(runs["run_key"], runs["position"]))
    ok = cases[(cases["status"] == "ok") & (cases[METRIC] > 0)].assign(run=lambda c: c["run_key"].map(where))
    fitted = exponents.dropna(subset=["slope"]).assign(run=lambda e: e["run_key"].map(where))
    verdicts, changes, points = [], [], []
    for kind, frame, key, column in (("time", ok, "case_id", METRIC), ("exponent", fitted, "series_key", "slope")):
        for name, rows in frame.sort_values("run").groupby(key, sort=False):
            verdict, found = _one(kind, name, rows, column)
            verdicts.append(verdict)
            changes += found
            points.append(rows.tail(WINDOW).assign(kind=kind, key=name, value=rows.tail(WINDOW)[column]))
    table = pd.DataFrame(verdicts, columns=VERDICT_COLUMNS)
    table = table.assign(order=table["class"].map(SEVERITY)).sort_values(["order", "series", "kind", "seq_len"])
    return Judged(table.drop(columns="order").reset_index(drop=True), pd.DataFrame(changes, columns=CHANGE_COLUMNS),
                  pd.concat(points, ignore_index=True) if points else pd.DataFrame(), runs)
