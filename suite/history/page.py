"""The trend page: one self-contained HTML file (figures embedded, styles inline, no scripts), in the
run report's style. Built from suite.history.series' tables alone: it knows nothing of the database.

A summary table first (one row per series: the worst class of its cases and of its exponent, and its
newest change point), the host's level (every case at once) with its figure and change points, then per
series its figure (suite.history.figures) and its change points.
"""

from __future__ import annotations

import base64
import math
from pathlib import Path

import jinja2
import pandas as pd

from suite.history import changes as rules
from suite.history import figures, level
from suite.history.series import SEVERITY, TOGETHER, Judged

TEMPLATES = Path(__file__).parent / "templates"


def fmt_size(row) -> str:
    """A change's size and interval: time as percent, an exponent as a difference."""
    if row["lo"] != row["lo"]:  # a step's (suite.history.steps): no interval
        return f"{row['size']:+.1%}"
    if row["kind"] != "exponent":
        return f"{row['size']:+.1%} [{row['lo']:+.1%}, {row['hi']:+.1%}]"
    return f"{row['size']:+.2f} [{row['lo']:+.2f}, {row['hi']:+.2f}]"


def _what(change) -> str:
    return {"time": f"n={change['seq_len']:.0f}", "exponent": "exponent"}.get(change["kind"], "its lengths together")


def summary(judged: Judged) -> pd.DataFrame:
    """One row per series: its worst class, its classes of time and exponent, its newest change point."""
    rows = []
    for key, verdicts in judged.verdicts[judged.verdicts["kind"] != "level"].groupby("series_key", sort=False):
        mine = judged.changes[judged.changes["series_key"] == key]
        exponent = verdicts[verdicts["kind"] == "exponent"]
        time = verdicts[verdicts["kind"] == "time"]
        lengths = verdicts[verdicts["kind"] == TOGETHER]
        worst = min(verdicts["class"], key=SEVERITY.get)
        newest = mine.sort_values("after_run").iloc[-1] if not mine.empty else None
        rows.append(
            {
                "series_key": key,
                "series": verdicts["series"].iloc[0],
                "class": worst,
                "time": ", ".join(f"{n} {c}" for c, n in time["class"].value_counts().items())
                + "".join(f"; its lengths together: {c}" for c in lengths["class"]),
                "exponent_class": exponent["class"].iloc[0] if not exponent.empty else "no fit",
                "exponent": exponent["newest"].iloc[0] if not exponent.empty else float("nan"),
                "claimed": exponent["claimed"].iloc[0] if not exponent.empty else float("nan"),
                "points": int(verdicts["points"].max()),
                "newest_change": "" if newest is None else f"{_what(newest)} {fmt_size(newest)} in {newest['commits']}",
            }
        )
    table = pd.DataFrame(rows)
    if table.empty:
        return table
    return table.assign(order=table["class"].map(SEVERITY)).sort_values(["order", "series"]).drop(columns="order")


def rule_text(judged) -> str:
    """What each case was judged against (its run's level, or raw) and why, with how many runs had no level."""
    rule, runs = judged.rule, judged.runs
    few = f"under {level.MIN_OTHERS + 1} cases of {level.MIN_SERIES} series"
    if rule is None or rule.raw_runs == len(runs):
        return f"judged raw: no run has a level (each has {few}), so a busy host and a change look alike"
    spreads = (
        f"each case's robust spread, median over the cases: {rule.spread_level:.1%} against the level, "
        f"{rule.spread_raw:.1%} raw"
    )
    without = f"; {rule.raw_runs} of {len(runs)} runs judged raw ({few})" if rule.raw_runs else ""
    if rule.against == "level":
        return (
            "each case judged against its run's level (the median shift of the run's cases of other series; "
            f"{spreads}){without}; the level judged as a series of its own"
        )
    why = "--against raw" if rule.asked == "raw" else "the level would add more noise than it takes away"
    return f"judged raw ({why}: {spreads}); the host's level judged as a series of its own"


def _figures(judged: Judged, keys: list[str]) -> dict[str, str]:
    points, out = judged.points, {}
    for key in keys:
        mine = points[points["series_key"] == key]
        out[key] = base64.b64encode(
            figures.series_figure(
                mine[mine["kind"] == "time"],
                mine[mine["kind"] == "exponent"],
                judged.changes[judged.changes["series_key"] == key],
                judged.runs,
            )
        ).decode()
    return out


def _host(judged: Judged) -> dict | None:
    """The host level's verdict, change points and figure (None where no run has a level)."""
    verdict = judged.verdicts[judged.verdicts["kind"] == "level"]
    if verdict.empty:
        return None
    points = judged.points[judged.points["kind"] == "level"]
    mine = judged.changes[judged.changes["kind"] == "level"]
    return {
        "verdict": verdict.iloc[0],
        "changes": mine,
        "image": base64.b64encode(figures.level_figure(points, mine, judged.runs)).decode(),
    }


def render(judged: Judged, title: dict) -> str:
    """The page. `title`: what the header says (database, fingerprint)."""
    table = summary(judged)
    keys = list(table["series_key"]) if not table.empty else []
    loader = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True, undefined=jinja2.StrictUndefined
    )
    loader.filters.update(size=fmt_size, short=lambda c: str(c)[:10])
    runs = judged.runs
    return loader.get_template("history.html.j2").render(
        title=title,
        summary=table,
        images=_figures(judged, keys),
        changes=judged.changes,
        verdicts=judged.verdicts,
        host=_host(judged),
        rule=rule_text(judged),
        level=level,
        runs=runs,
        first=runs.iloc[0] if len(runs) else None,
        last=runs.iloc[-1] if len(runs) else None,
        rules=rules,
        time_pct=100 * math.expm1(rules.THRESHOLD["time"]),
        counts=table_counts(judged),
    )


def table_counts(judged: Judged) -> dict:
    """The classes of every case's time and series' exponent (the host's level apart)."""
    verdicts = judged.verdicts[judged.verdicts["kind"] != "level"] if not judged.verdicts.empty else judged.verdicts
    return verdicts["class"].value_counts().to_dict() if not verdicts.empty else {}
