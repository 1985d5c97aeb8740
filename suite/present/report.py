"""The HTML report of a run, built from its results folder alone (no re-run), and its terminal summary.

`reports/NAME/index.html` is self-contained: figures are embedded PNGs, styles inline, no scripts;
the results table is copied beside it so that the page and its raw data travel together.
"""

from __future__ import annotations

import base64
from pathlib import Path

import jinja2
import numpy as np
import pandas as pd

from suite.analyse import Analysis, analyse, fits, glance
from suite.analyse.terms import machines
from suite.plan.settings import Settings
from suite.present import figures
from suite.store import atomic
from suite.store.rundir import RunDir

TEMPLATES = Path(__file__).parent / "templates"


def fmt_n(x) -> str:
    return "" if x is None or pd.isna(x) else f"{x:g}"


def fmt_fitted(row) -> str:
    """The lengths the power law was fitted over, and the verdict's own where it was fitted on the top path
    alone and that differs: "256–262144 (verdict: 16384–262144)"."""
    span = f"{fmt_n(row['used_min'])}–{fmt_n(row['used_max'])}"
    alone = row.get("verdict_from")
    same = alone is None or pd.isna(alone) or alone == row["used_min"]
    return span if same else f"{span} (verdict: {fmt_n(alone)}–{fmt_n(row['used_max'])})"


def fmt_slope(fit) -> str:
    if pd.isna(fit["slope"]):
        return "–"
    lo = "−∞" if not np.isfinite(fit["lo"]) else f"{fit['lo']:.2f}"
    hi = "∞" if not np.isfinite(fit["hi"]) else f"{fit['hi']:.2f}"
    return f"{fit['slope']:.2f} [{lo}, {hi}]"


def fmt_si(x, unit="") -> str:
    if x is None or pd.isna(x):
        return ""
    for scale, prefix in ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= scale:
            return f"{x / scale:.3g} {prefix}{unit}"
    return f"{x:.3g} {unit}"


def fmt_bytes(x) -> str:
    """A size in binary units, as sysfs and lscpu give caches: "480 MiB"."""
    for scale, unit in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if x >= scale:
            return f"{x / scale:.0f} {unit}" if x >= 100 * scale else f"{x / scale:.3g} {unit}"
    return f"{x:g} B"


def cache_levels(env: dict, bandwidth: dict) -> str:
    """The CPU cache levels the cost model places its steps at: sysfs's (env.json), the last at the reach the
    run's bandwidth sweep measured where that is smaller (suite.analyse.terms.reached); none in a run without a CPU
    device, whose env.json still records the host's caches."""
    if "cpu" not in (env or {}).get("devices", ["cpu"]):
        return "none (no CPU device in this run)"
    levels = (machines(env, bandwidth).get("cpu") or {}).get("caches") or {}
    return (
        ", ".join(
            f"{name} {fmt_bytes(level['bytes'])}"
            + (f" (the sweep's reach; sysfs: {fmt_bytes(level['sysfs_bytes'])})" if "sysfs_bytes" in level else "")
            for name, level in levels.items()
        )
        or "none recorded (env.json has no CPU caches)"
    )


def fmt_joules(x) -> str:
    """Energy from joules down to nanojoules (a token's share of a call is µJ to nJ): "3.2 mJ"."""
    if x is None or pd.isna(x):
        return ""
    if abs(x) >= 1:
        return fmt_si(x, "J")
    for scale, prefix in ((1e-3, "m"), (1e-6, "µ")):
        if abs(x) >= scale:
            return f"{x / scale:.3g} {prefix}J"
    return f"{x / 1e-9:.3g} nJ"


def measured_energy(eff: pd.DataFrame) -> bool:
    """Whether a row of the efficiency table has the GPU's energy (NVML): its columns are shown only then."""
    return "energy_per_call_j" in eff and bool(eff["energy_per_call_j"].notna().any())


def fmt_lengths(row) -> str:
    """Where a series' adaptive lengths stopped and why ("" where they settled), without the verdict's why
    that the ladder's note repeats when the verdict shown beside it is that same one."""
    lengths = row.get("lengths") if isinstance(row.get("lengths"), str) else ""
    if not lengths or lengths.startswith("settled"):
        return ""
    why = row.get("why") if isinstance(row.get("why"), str) else ""
    return lengths.replace(f": {why}", "") if why and row.get("verdict") != "confirmed" else lengths


def fmt_shares(shares, top: int = 3) -> str:
    """The `top` largest of a profiled call's operator shares: "bmm 52% · mul 11% · _softmax 6%"."""
    if not isinstance(shares, dict):
        return ""
    return " · ".join(f"{name} {100 * share:.0f}%" for name, share in list(shares.items())[:top])


def fmt_text(value) -> str:
    """A text column that a fit may lack (NaN, None): blank."""
    return value if isinstance(value, str) else ""


def fmt_excluded(values) -> str:
    values = list(values) if values is not None else []
    return ", ".join(f"{v:g}" for v in values)


def other_fits(fits: pd.DataFrame) -> pd.DataFrame:
    """Exponents in heads, head dim, KV heads and features, as display rows."""
    if fits.empty:
        return fits
    rows = fits[~fits["axis"].isin(["seq_len", "kv_len", "valid_tokens"])].copy()
    return rows.sort_values(["axis", "variant", "series", "metric"])


def slice_tables(fits: pd.DataFrame) -> list[tuple[str, str, pd.DataFrame]]:
    """(title, anchor, rows) of the slices whose verdicts no other table shows: training and causal time and memory."""
    out = []
    for title, anchor, names in (
        ("Training: forward and backward, in n", "training", ("training time", "training memory")),
        ("Causal: in n", "causal", ("causal time",)),
    ):
        parts = [
            glance.rows_of(fits, one).assign(length="n" if one.metric == "time" else "n (peak memory)")
            for one in glance.SLICES
            if one.name in names
        ]
        rows = pd.concat(parts) if parts else pd.DataFrame()
        out.append((title, anchor, rows.sort_values(["variant", "series", "metric"]) if not rows.empty else rows))
    return out


def efficiency_rows(eff: pd.DataFrame) -> pd.DataFrame:
    """Per series of the n sweeps, forward and forward+backward, its largest-n case: FLOP/s, share of
    peak, work ratio, memory over the output, its roofline."""
    last = figures.largest_n(eff)
    return last if last.empty else last.sort_values(["variant", "series"])


CROSS_KEYS = ["variant", "series", "device", "dtype", "num_heads", "head_dim"]
SPEEDUP = "speed-up at the largest n"  # a column per reference: "<ref> speed-up at the largest n"


def crossover_rows(table: pd.DataFrame, speedups: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per series: a column per reference implementation of full attention (the crossover),
    and one per reference with the speed-up at the largest n both measured (FLOPs allow / measured)."""
    wide = (
        table.pivot_table(index=CROSS_KEYS, columns="reference", values="crossover", aggfunc="first")
        if not table.empty
        else pd.DataFrame()
    )
    if speedups is not None and not speedups.empty:
        last = speedups.sort_values("seq_len").groupby(CROSS_KEYS + ["reference"]).tail(1)
        text = last.assign(
            text=[
                f"×{b:.3g} allowed, ×{s:.3g} measured (n = {n:g})"
                for b, s, n in zip(last["flops_bound"], last["speedup"], last["seq_len"])
            ]
        )
        speed = text.pivot_table(index=CROSS_KEYS, columns="reference", values="text", aggfunc="first")
        speed.columns = [f"{ref} {SPEEDUP}" for ref in speed.columns]
        wide = speed if wide.empty else wide.join(speed, how="outer")
    return wide if wide.empty else wide.reset_index().fillna("")


def failures(frame: pd.DataFrame) -> pd.DataFrame:
    bad = frame[frame["status"] != "ok"]
    return bad[
        [
            "variant",
            "impl",
            "device",
            "dtype",
            "mode",
            "seq_len",
            "num_heads",
            "num_kv_heads",
            "head_dim",
            "causal",
            "params",
            "status",
            "reason",
        ]
    ]


def build(run: RunDir, report_dir: Path) -> tuple[Path, Analysis]:
    """Write report_dir/index.html (and the results beside it) from the run; the page's path and
    the analysis it shows (for the terminal's summary, without fitting twice)."""
    report_dir = Path(report_dir)
    frame = run.read_table()
    peaks, env, plan = run.probe(), run.env(), run.plan()
    bandwidth = run.bandwidth()
    result = analyse(
        frame,
        peaks,
        Settings.from_plan(plan.get("settings", {})).busy_limit_cores,
        run.read_json(RunDir.LADDERS).get("ladders", []),
        bandwidth,
        env,
    )
    efficiency = efficiency_rows(result.efficiency)
    images = {
        name: (caption, base64.b64encode(data).decode())
        for name, (caption, data) in figures.all_figures(result).items()
    }
    report_dir.mkdir(parents=True, exist_ok=True)
    run.copy_to(report_dir, (RunDir.CSV, RunDir.PARQUET, RunDir.ENV, RunDir.PROBE, RunDir.BANDWIDTH, RunDir.LADDERS))
    env_loader = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True, undefined=jinja2.StrictUndefined
    )
    env_loader.filters.update(
        n=fmt_n,
        slope=fmt_slope,
        si=fmt_si,
        excluded=fmt_excluded,
        shares=fmt_shares,
        text=fmt_text,
        joules=fmt_joules,
        bytes=fmt_bytes,
        lengths=fmt_lengths,
        fitted=fmt_fitted,
        first_word=glance.verdict_of,
    )
    page = env_loader.get_template("report.html.j2").render(
        name=run.name,
        plan=plan,
        env=env,
        peaks=peaks,
        bandwidth=bandwidth,
        claims=result.claims,
        others=other_fits(result.fits),
        crossovers=crossover_rows(result.crossovers, result.speedups),
        speedup=SPEEDUP,
        efficiency=efficiency,
        energy=measured_energy(efficiency),
        status=result.status,
        failures=failures(frame),
        images=images,
        counts=frame["status"].value_counts().to_dict(),
        tolerance=fits.TOLERANCE,
        min_span=fits.MIN_SPAN,
        max_width=fits.MAX_WIDTH,
        floor_share=fits.FLOOR_SHARE,
        fits_count=len(result.fits),
        noise=result.noise,
        layers=result.layers,
        cross=result.cross,
        padding=result.padding,
        decode=result.decode,
        cache_levels=cache_levels(env, bandwidth),
        glance=glance.glance(result.fits),
        slices=glance.SLICES,
        slice_tables=slice_tables(result.fits),
    )
    path = atomic.write_text(report_dir / "index.html", page)
    return path, result


# NB: not params: the series' own label names them ("native (window=16)")
SHAPE_FIELDS = {
    "device": "{}",
    "dtype": "{}",
    "mode": "{}",
    "batch": "B={}",
    "num_heads": "H={}",
    "num_kv_heads": "Hkv={}",
    "head_dim": "d={}",
    "causal": "causal={}",
}


def _distinguishing(table: pd.DataFrame) -> pd.Series:
    """Per series, the fields that tell apart two series of one variant and implementation (dtype,
    d, causal...); empty where each variant and implementation has one series."""
    groups = table.groupby(["variant", "series"], sort=False)
    varying = [f for f in SHAPE_FIELDS if f in table and (groups[f].nunique(dropna=False) > 1).any()]

    def value(v):
        return int(v) if isinstance(v, float) and v.is_integer() else v

    return table.apply(lambda row: " ".join(SHAPE_FIELDS[f].format(value(row[f])) for f in varying), axis=1)


def summary(table: pd.DataFrame, length: str = "n") -> str:
    """The verdict table (analysis.claims, or analysis.cross with `length` "n_q | n_k": each series
    names the length it holds) as plain text, for the terminal at the end of a run."""
    if table.empty:
        return "no exponent could be fitted (each series needs 3 values of n)"
    shape = _distinguishing(table)
    width = max([len(s) for s in shape] + [0])
    col = (lambda text: f"{text:<{width}} ") if width else (lambda text: "")
    wide = 30 if length != "n" else 22  # a cross series' label names the length it holds: "sdpa [n_k=1024]"
    lines = [
        f"{'variant':<15} {'implementation':<{wide}} "
        f"{col('')}{'exponent [95% CI]' if wide > 22 else 'exponent in n [95% CI]':<24} "
        f"{'claim':>5}  verdict"
    ]
    for i, row in table.iterrows():
        lines.append(
            f"{row['variant']:<15} {row['series'][:wide]:<{wide}} {col(shape[i])}{fmt_slope(row):<24} "
            f"{row['claimed']:>5g}  {row['verdict']}"
        )
    lengths = table["lengths"] if "lengths" in table else pd.Series("", index=table.index)
    open_ = table[(table["verdict"] == "inconclusive") | ((lengths != "") & ~lengths.str.startswith("settled"))]
    if not open_.empty:
        lines.append("not settled, and what would settle it:")
    for i, row in open_.iterrows():
        lengths = fmt_lengths(row)
        lines.append(
            f"  {row['variant']}/{row['series']}{(' ' + shape[i]) if shape[i] else ''}: {row['why']}"
            + (f"; lengths {lengths}" if lengths else "")
        )
    return "\n".join(lines)
