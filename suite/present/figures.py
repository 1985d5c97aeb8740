"""Seaborn figures of an Analysis, as PNG bytes. Knows nothing of HTML or files.

Every figure is one `relplot` over long-form rows of the results table (seaborn's shape), with the
fitted power laws and the claimed slopes drawn on top where a fit exists.
"""

from __future__ import annotations

import io

import matplotlib
import matplotlib.ticker

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from adjustText import adjust_text  # noqa: E402

from suite.analyse import Analysis  # noqa: E402

YLABEL = {
    "time_s": "time per call (s)",
    "time_min_s": "time per call, fastest (s)",
    "peak_bytes": "peak memory above inputs (bytes)",
    "flops_counted": "FLOPs counted (implementation)",
    "approx_error": "relative error against full",
    "kv_bytes": "KV-cache bytes",
    "useful_flops_per_s": "useful FLOP/s (algorithm's FLOPs / time)",
}
METRIC_OF = {"time_min_s": "time", "peak_bytes": "memory", "flops_counted": "flops", "approx_error": "error"}
XLABEL = {
    "seq_len": "sequence length n",
    "num_heads": "heads H",
    "head_dim": "head dim d",
    "num_kv_heads": "KV heads",
    "features": "random features m",
}


def png(fig) -> bytes:
    for ax in fig.axes:  # NB: log axes label minor ticks over short spans, and the labels collide
        ax.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return buffer.getvalue()


def main_shape(frame: pd.DataFrame, modes: tuple[str, ...] = ("fwd",)) -> pd.DataFrame:
    """The rows of the n sweeps: forward (causal or not) self-attention over full sequences (no cross
    attention, no padding: their own sections), and the most common batch, heads and head dim per
    variant; `modes` adds forward+backward at that shape."""
    rows = frame[(frame["status"] == "ok") & frame["kv_len"].isna() & frame["valid_fraction"].isna()]
    out = []
    for _, group in rows.groupby("variant"):
        sweep = group.groupby(["batch", "num_heads", "head_dim", "device", "dtype"])["seq_len"].nunique()
        if sweep.empty or sweep.max() < 2:
            continue
        batch, heads, dim, device, dtype = sweep.idxmax()
        out.append(
            group[
                (group["batch"] == batch)
                & (group["num_heads"] == heads)
                & (group["head_dim"] == dim)
                & (group["device"] == device)
                & (group["dtype"] == dtype)
                & group["mode"].isin(modes)
            ]
        )
    return pd.concat(out) if out else rows.iloc[:0]


def colours(series: pd.Series) -> dict:
    names = sorted(series.unique())
    return dict(zip(names, sns.color_palette("tab20" if len(names) > 10 else "tab10", n_colors=len(names))))


def scaling(analysis: Analysis, column: str) -> bytes | None:
    """`column` against n, a panel per variant, a line per implementation, fits and claims drawn."""
    data = main_shape(analysis.frame).dropna(subset=[column])
    data = data[data[column] > 0]
    if data.empty:
        return None
    points = data.groupby(["variant", "series"])["seq_len"].transform("nunique")
    data = data[points >= 2].sort_values(["variant", "series", "seq_len"])  # lines, not lone points
    palette = colours(data["series"])
    grid = sns.relplot(
        data=data,
        x="seq_len",
        y=column,
        hue="series",
        col="variant",
        col_wrap=4,
        kind="line",
        marker="o",
        height=2.6,
        aspect=1.25,
        palette=palette,
        hue_order=list(palette),
        facet_kws={"sharey": False, "sharex": False},
        errorbar=None,
    )
    grid.set(xscale="log", yscale="log")
    fits = analysis.fits
    metric = METRIC_OF.get(column)
    for variant, ax in grid.axes_dict.items():
        if fits.empty or not metric:
            break
        mine = fits[
            (fits["variant"] == variant)
            & (fits["axis"] == "seq_len")
            & (fits["metric"] == metric)
            & fits["series"].isin(data.loc[data["variant"] == variant, "series"].unique())
        ]
        anchored = False
        # the claimed slope is drawn through the series that comes closest to it
        mine = mine.assign(gap=(mine["slope"] - mine["claimed"].astype(float)).abs()).sort_values("gap")
        for _, fit in mine.iterrows():
            subset = data[(data["variant"] == variant) & (data["series"] == fit["series"])]
            if subset.empty or subset["num_kv_heads"].nunique() > 1:
                continue
            x = np.geomspace(fit["used_min"], fit["used_max"], 16)
            ax.plot(
                x, np.exp(fit["intercept"]) * x ** fit["slope"], ls="--", lw=1, color=palette.get(fit["series"], "k")
            )
            if not anchored and fit["claimed"] is not None and not pd.isna(fit["claimed"]):
                # the claimed slope, through the largest-n point of the first fitted series
                x0, y0 = fit["used_max"], np.exp(fit["intercept"]) * fit["used_max"] ** fit["slope"]
                xs = np.geomspace(x0 / 16, x0, 8)
                ax.plot(xs, y0 * (xs / x0) ** fit["claimed"], ls=":", lw=2, color="0.3")
                ax.text(
                    xs[0],
                    y0 * (xs[0] / x0) ** fit["claimed"],
                    f"claim n^{fit['claimed']:g}",
                    fontsize=7,
                    color="0.3",
                    va="bottom",
                )
                anchored = True
    grid.set_titles("{col_name}")
    grid.set_axis_labels(XLABEL["seq_len"], YLABEL[column])
    grid.figure.suptitle(f"{YLABEL[column]} against n — dashed: fitted power law; dotted: claimed slope", y=1.02)
    return png(grid.figure)


def sweep(analysis: Analysis, axis: str, column: str, where=None) -> bytes | None:
    """`column` against one non-n axis (heads, head dim, KV heads, features), a panel per variant."""
    data = analysis.frame[analysis.frame["status"] == "ok"].dropna(subset=[axis, column])
    if where is not None:
        data = data[where(data)]
    fits = analysis.fits
    if fits.empty:
        return None
    swept = fits[(fits["axis"] == axis)][["variant", "series"]].drop_duplicates()
    data = data.merge(swept, on=["variant", "series"])
    counts = data.groupby(["variant", "series", "seq_len"])[axis].nunique()
    keep = counts[counts >= 3].reset_index()[["variant", "series", "seq_len"]]
    data = data.merge(keep, on=["variant", "series", "seq_len"])
    if data.empty:
        return None
    data = data.assign(line=data["series"] + " n=" + data["seq_len"].astype(str)).sort_values(axis)
    grid = sns.relplot(
        data=data,
        x=axis,
        y=column,
        hue="line",
        col="variant",
        kind="line",
        marker="o",
        height=2.8,
        aspect=1.2,
        facet_kws={"sharey": False},
        errorbar=None,
    )
    grid.set(xscale="log", yscale="log")
    grid.set_titles("{col_name}")
    grid.set_axis_labels(XLABEL[axis], YLABEL[column])
    return png(grid.figure)


def efficiency(analysis: Analysis) -> bytes | None:
    """Useful FLOP/s against n per variant, with the measured matmul peak as a line."""
    eff = analysis.efficiency
    data = main_shape(eff) if not eff.empty else eff
    if data.empty:
        return None
    data = data.sort_values(["variant", "series", "seq_len"])
    palette = colours(data["series"])
    grid = sns.relplot(
        data=data,
        x="seq_len",
        y="useful_flops_per_s",
        hue="series",
        col="variant",
        palette=palette,
        hue_order=list(palette),
        col_wrap=4,
        kind="line",
        marker="o",
        height=2.6,
        aspect=1.25,
        errorbar=None,
    )
    grid.set(xscale="log", yscale="log")
    peaks = data["peak_flops_per_s"].dropna().unique()
    for ax in grid.axes.flat:
        for peak in peaks:
            ax.axhline(peak, color="0.3", ls=":", lw=1.5)
    grid.set_titles("{col_name}")
    grid.set_axis_labels(XLABEL["seq_len"], YLABEL["useful_flops_per_s"])
    grid.figure.suptitle("achieved FLOP/s — dotted: the device's measured matmul peak", y=1.02)
    return png(grid.figure)


def largest_n(eff: pd.DataFrame) -> pd.DataFrame:
    """Per series of the n sweeps, forward and forward+backward, its largest-n row."""
    if eff.empty:
        return eff
    main = main_shape(eff, modes=("fwd", "fwd_bwd"))
    return main.sort_values("seq_len").groupby(["variant", "series"], sort=True).tail(1)


MODE_COLOURS = {"fwd": "tab:blue", "fwd_bwd": "tab:orange"}


def roofline(analysis: Analysis) -> bytes | None:
    """A roofline per device and dtype: the algorithm's arithmetic intensity (its products' FLOPs per
    byte of its traffic) across, those FLOPs per second up, the measured peak and bandwidth as the ceilings (the cache
    level's bandwidth dotted); one point per implementation at its series' largest n."""
    data = largest_n(analysis.efficiency)
    if data.empty:
        return None
    data = data.dropna(subset=["intensity_traffic", "product_flops_per_s", "peak_flops_per_s", "bandwidth_bytes_per_s"])
    data = data[data["intensity_traffic"] > 0]
    if data.empty:
        return None
    groups = list(data.groupby(["device", "dtype"]))
    fig, axes = plt.subplots(1, len(groups), figsize=(11 * len(groups), 9), squeeze=False)
    for ax, ((device, dtype), rows) in zip(axes[0], groups):
        peak, bw = rows["peak_flops_per_s"].iloc[0], rows["bandwidth_bytes_per_s"].iloc[0]
        cache = rows["cache_bandwidth_bytes_per_s"].iloc[0]
        lo = min(rows["intensity_traffic"].min(), peak / bw) / 4
        hi = max(rows["intensity_traffic"].max(), peak / bw) * 4
        x = np.geomspace(lo, hi, 200)
        ax.plot(
            x,
            np.minimum(peak, bw * x),
            color="0.15",
            lw=2,
            label=f"ceiling: min({peak / 1e9:.3g} GFLOP/s, {bw / 1e9:.3g} GB/s × intensity)",
        )
        if cache == cache:
            ax.plot(
                x,
                np.minimum(peak, cache * x),
                color="0.55",
                lw=1.2,
                ls=":",
                label=f"in-cache bandwidth {cache / 1e9:.3g} GB/s",
            )
        labels = []
        for mode, colour in MODE_COLOURS.items():
            mine = rows[rows["mode"] == mode]
            if mine.empty:
                continue
            ax.scatter(
                mine["intensity_traffic"],
                mine["product_flops_per_s"],
                color=colour,
                s=28,
                zorder=3,
                label=f"{mode} (largest n)",
            )
            labels += [
                ax.text(
                    r["intensity_traffic"],
                    r["product_flops_per_s"],
                    f"{r['variant']}/{r['impl']}",
                    fontsize=6.5,
                    color=colour,
                )
                for _, r in mine.iterrows()
            ]
        ax.set(
            xscale="log",
            yscale="log",
            title=f"{device}/{dtype}",
            xlabel="arithmetic intensity: the products' FLOPs / byte of the algorithm's traffic",
            ylabel="FLOP/s of the algorithm's products (its FLOPs with a feature map's or projection's / time)",
        )
        ax.legend(fontsize=8, loc="lower right")
        # the labels moved apart where they would overlap, each tied to its point by a thin line
        adjust_text(labels, ax=ax, arrowprops={"arrowstyle": "-", "color": "0.6", "lw": 0.5})
    fig.suptitle("Roofline: each implementation at its largest n against the measured ceilings")
    return png(fig)


def speedup(analysis: Analysis, reference: str = "full/sdpa") -> bytes | None:
    """Speed-up over full attention against n, a panel per variant: measured (solid) and what the
    series' FLOPs allow (dashed); the crossover is where the solid line crosses 1."""
    data = analysis.speedups
    if data.empty:
        return None
    data = data[(data["reference"] == reference) & data["mode"].isin(["fwd", "fwd_bwd"])]
    counts = data.groupby(["variant", "series"])["seq_len"].transform("nunique")
    data = data[counts >= 2].sort_values(["variant", "series", "seq_len"])
    if data.empty:
        return None
    palette = colours(data["series"])
    variants = sorted(data["variant"].unique())
    cols = min(4, len(variants))
    rows = -(-len(variants) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 2.9 * rows), squeeze=False)
    for ax, variant in zip(axes.flat, variants):
        for series, line in data[data["variant"] == variant].groupby("series"):
            ax.plot(line["seq_len"], line["speedup"], marker="o", ms=3, color=palette[series], label=series)
            ax.plot(line["seq_len"], line["flops_bound"], ls="--", lw=1, color=palette[series])
        ax.axhline(1, color="0.3", lw=1, ls=":")
        ax.set(xscale="log", yscale="log", title=variant, xlabel=XLABEL["seq_len"])
        ax.legend(fontsize=6)
    for ax in list(axes.flat)[len(variants) :]:
        ax.set_visible(False)
    axes[0][0].set_ylabel(f"speed-up over {reference}")
    fig.suptitle(
        f"Speed-up over {reference}: measured (solid) and what the FLOPs allow (dashed); "
        "crossover where solid passes 1",
        y=1.01,
    )
    fig.tight_layout()
    return png(fig)


def all_figures(analysis: Analysis) -> dict[str, tuple[str, bytes]]:
    """name -> (caption, PNG) for every figure the data allows."""
    made = {
        "time": (
            "Time per call against n: each case's fastest call, the time the exponents are fitted to "
            "(the medians are in the tables).",
            scaling(analysis, "time_min_s"),
        ),
        "memory": ("Peak memory above the inputs against n.", scaling(analysis, "peak_bytes")),
        "flops": (
            "FLOPs counted by FlopCounterMode (the implementation's work) against n; flex and "
            "CSR paths cannot be counted.",
            scaling(analysis, "flops_counted"),
        ),
        "efficiency": ("Useful FLOP/s (the algorithm's FLOPs over the time) against n.", efficiency(analysis)),
        "roofline": (
            "Roofline: each implementation at its series' largest n (forward blue, forward+backward "
            "orange), its arithmetic intensity the FLOPs of the algorithm's products (its own and a feature map's "
            "or projection's) over its traffic (docs/CLAIMS.md, "
            '"Bytes"); the ceilings are this run\'s GEMM and bandwidth probes. Rows without a traffic '
            "model (the classic forms) are not drawn.",
            roofline(analysis),
        ),
        "speedup": (
            "Speed-up over full attention (sdpa, same device and shape) against n: measured, solid; the "
            "speed-up the series' FLOPs allow (full's FLOPs over its own), dashed.",
            speedup(analysis),
        ),
        "heads": (
            "Time against heads H (claim: H¹).",
            sweep(analysis, "num_heads", "time_min_s", lambda d: d["mode"] != "decode"),
        ),
        "head_dim": (
            "Time against head dim d (claims: linear d², performer and softmax d¹).",
            sweep(analysis, "head_dim", "time_min_s"),
        ),
        "kv_time": (
            "Decode time (one query against a cache of n) against KV heads.",
            sweep(analysis, "num_kv_heads", "time_min_s", lambda d: d["mode"] == "decode"),
        ),
        "kv_bytes": (
            "KV-cache bytes against KV heads.",
            sweep(analysis, "num_kv_heads", "kv_bytes", lambda d: d["mode"] == "decode"),
        ),
        "features_error": (
            "Performer: relative error of its output against full softmax attention, against "
            "the number of random features m.",
            sweep(analysis, "features", "approx_error"),
        ),
        "features_time": ("Performer: time against features m (claim: m¹).", sweep(analysis, "features", "time_min_s")),
    }
    return {name: (caption, image) for name, (caption, image) in made.items() if image is not None}
