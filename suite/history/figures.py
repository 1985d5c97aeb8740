"""The trend page's figures, as PNG bytes: one per series, time at each n and the exponent over the runs,
and one of the host's level.

Pure: suite.history.series' tables in (points with their run's position, change points), bytes out;
nothing here knows of the database or of HTML. Left: each case's fastest call over the runs as it is
judged (its run's level divided out where it is judged against it; log scale), a line per n with a band
up to the median call of the run. Right: the series' fitted time
exponent in n with its 95% interval as a band, and its claim as a dashed line. A change point is a
shaded span from the last run before it to the first after it (red: slower, green: faster), labelled
with its size.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402

from suite.history.series import METRIC, TOGETHER  # noqa: E402
from suite.present.figures import png  # noqa: E402

SLOWER, FASTER = "#d62728", "#2ca02c"


def _spans(ax, changes: pd.DataFrame, percent: bool) -> None:
    """Each change point's span, from the last run before it to the first after; one label per place
    (the sizes of the cases that changed there, smallest to largest)."""
    for (before, after, slower), group in changes.groupby(["before_run", "after_run", "slower"]):
        colour = SLOWER if slower else FASTER
        ax.axvspan(before, after, color=colour, alpha=0.2, lw=0)
        sizes = sorted(group["size"])
        fmt = (lambda v: f"{v:+.0%}") if percent else (lambda v: f"{v:+.2f}")
        text = fmt(sizes[0]) if len(sizes) == 1 else f"{fmt(sizes[0])}…{fmt(sizes[-1])}"
        ax.annotate(
            text,
            (after, 0.98),
            xycoords=("data", "axes fraction"),
            color=colour,
            fontsize=8,
            ha="left",
            va="top",
            xytext=(2, 0),
            textcoords="offset points",
        )


def _ticks(ax, runs: pd.DataFrame) -> None:
    """x: the run's position in the history; a few ticks labelled with their commit."""
    step = max(1, int(np.ceil(len(runs) / 8)))
    chosen = runs.iloc[::step]
    ax.set_xticks(chosen["position"])
    ax.set_xticklabels([c[:7] for c in chosen["git_commit"]], rotation=45, ha="right", fontsize=7)
    ax.set_xlim(-0.5, len(runs) - 0.5)


def _times(ax, points: pd.DataFrame, changes: pd.DataFrame, runs: pd.DataFrame) -> None:
    data = points.sort_values(["seq_len", "run"])
    palette = dict(
        zip(sorted(data["seq_len"].unique()), sns.color_palette("viridis", n_colors=data["seq_len"].nunique()))
    )
    for n, rows in data.groupby("seq_len"):
        ax.plot(rows["run"], rows["value"], marker="o", ms=3, lw=1, color=palette[n], label=f"n={int(n)}")
        at = rows["value"] / rows[METRIC]  # the run's level divided out, as from the point
        ax.fill_between(rows["run"], rows[METRIC] * at, rows["time_s"] * at, color=palette[n], alpha=0.2, lw=0)
    _spans(ax, changes, percent=True)
    ax.set_yscale("log")
    leveled = bool((data["value"] != data[METRIC]).any())
    ax.set_ylabel("fastest call (s), band to the median" + (",\nrun's level divided out" if leveled else ""))
    ax.legend(fontsize=7, loc="upper left", ncol=2)
    _ticks(ax, runs)


def _exponent(ax, points: pd.DataFrame, changes: pd.DataFrame, runs: pd.DataFrame) -> None:
    if points.empty:
        ax.text(
            0.5, 0.5, "no exponent fitted (a series needs 3 lengths)", ha="center", transform=ax.transAxes, color="#555"
        )
        ax.set_axis_off()
        return
    rows = points.sort_values("run")
    ax.plot(rows["run"], rows["value"], marker="o", ms=3, lw=1, color="#333")
    ax.fill_between(rows["run"], rows["lo"], rows["hi"], color="#333", alpha=0.15, lw=0, label="95% interval")
    claimed = rows["claimed"].dropna()
    if not claimed.empty:
        ax.axhline(float(claimed.iloc[-1]), ls="--", color="#1f77b4", lw=1, label=f"claim n^{claimed.iloc[-1]:g}")
    _spans(ax, changes, percent=False)
    ax.set_ylabel("time exponent in n")
    ax.legend(fontsize=7, loc="upper left")
    _ticks(ax, runs)


def level_figure(points: pd.DataFrame, changes: pd.DataFrame, runs: pd.DataFrame) -> bytes:
    """The host's level over the runs (each run's median shift of its cases, in percent), its change points."""
    fig, ax = plt.subplots(figsize=(11, 2.8))
    rows = points.sort_values("run")
    ax.plot(rows["run"], 100 * (rows["value"] - 1), marker="o", ms=3, lw=1, color="#333")
    ax.axhline(0, color="#999", lw=0.8)
    _spans(ax, changes, percent=True)
    ax.set_ylabel("host level: every case's\nshift from its median (%)")
    _ticks(ax, runs)
    fig.tight_layout()
    return png(fig)


def series_figure(times: pd.DataFrame, exponents: pd.DataFrame, changes: pd.DataFrame, runs: pd.DataFrame) -> bytes:
    """One series' figure. `times`/`exponents`: its points (suite.history.series' `points`, kind time and
    exponent); `changes`: its change points (its lengths' together shaded with its cases'); `runs`: every run of the history (position, git_commit)."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.2))
    _times(left, times, changes[changes["kind"].isin(["time", TOGETHER])], runs)
    _exponent(right, exponents, changes[changes["kind"] == "exponent"], runs)
    fig.tight_layout()
    return png(fig)
