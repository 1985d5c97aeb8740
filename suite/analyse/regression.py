"""Compare two runs case by case, and decide whether the new one regressed. Pure: tables in, tables out.

A case is *slower* only when its change is both significant and larger than an effect floor.
Significant: its change of median log time, against the noise between its worker processes (the
replicates) and between runs (from the scatter of the whole grid's changes, by the Qn scale: a
half of the grid moved together does not inflate it), with p-values corrected across the grid by
Benjamini–Hochberg. A common move of the grid under the effect floor is drift and is taken out; one
at the floor or beyond is a finding that blocks, unless `allow_shift` says the machine moved. Exponent drifts
and verdict changes come from the fits of both runs (suite.analyse.exponents).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats
from statsmodels.robust.scale import qn_scale

from suite.analyse.exponents import SHAPE
from suite.analyse.exponents import exponents as fit_exponents
from suite.analyse.gate import Rule  # noqa: F401 - the gate's settings, used and re-exported here

STABLE_ENV = ("torch", "xformers", "cuda", "python", "cpu_model", "cpu_count", "threads", "allocator", "cuda_device")
LABEL = [
    "variant",
    "impl",
    "device",
    "dtype",
    "mode",
    "batch",
    "seq_len",
    "kv_len",
    "num_heads",
    "num_kv_heads",
    "head_dim",
    "causal",
    "params",
]
BLOCKING = {
    "missing": "in the baseline, not in the new run",
    "failed": "ok in the baseline, failed in the new run",
    "untested": "too few timings to test",
    "new": "no baseline to compare with",
}


MIN_PROCESS_SIGMA = 0.005  # a case's processes never agree better than 0.5% (log time)
# cases move between runs by a few percent at least, short ones more (docs/performance.md, "Figures behind the
# code's choices")
MIN_RUN_SIGMA = 0.02
MIN_CASES_FOR_SHIFT = 5  # fewer tested cases: no grid shift is estimated, the run noise is the minimum


def timings(row: pd.Series) -> tuple[np.ndarray, str]:
    """The values to test: per-process medians when the case ran in ≥ 2 processes, else raw samples."""
    reps = row.get("replicate_times_s")
    if reps is not None and len(reps) >= 2:
        return np.asarray(reps, float), "processes"
    samples = row.get("samples")
    return (np.asarray(samples, float) if samples is not None else np.array([])), "samples"


def log_change(base: np.ndarray, new: np.ndarray) -> tuple[float, float]:
    """(change of log time, its standard error): medians, so that a minority of slow processes does
    not move the estimate, and a spread that does not hide them either.

    NB: per process, some sub-millisecond cases are bimodal (some of the processes markedly slower,
    whatever the core): the spread is the larger of the standard deviation and the
    MAD-based σ, times √(π/2) for the median's efficiency, and never under MIN_PROCESS_SIGMA.
    """
    lb, ln = np.log(base), np.log(new)

    def spread(x):
        mad = 1.4826 * float(np.median(np.abs(x - np.median(x))))
        return max(mad, float(np.std(x, ddof=1)), MIN_PROCESS_SIGMA)

    se = math.sqrt(math.pi / 2 * (spread(lb) ** 2 / len(lb) + spread(ln) ** 2 / len(ln)))
    return float(np.median(ln) - np.median(lb)), max(se, bootstrap_se(lb, ln))


def bootstrap_se(lb: np.ndarray, ln: np.ndarray, draws: int = 2000) -> float:
    """The spread of the difference of medians over resamples of each side's processes (seeded).

    NB: where a case's processes are bimodal (a few of them much slower, as short native kernels can be), a
    side's median jumps between the modes with the draw: the normal formula above does not see it and calls
    too many A/A comparisons changed; this does (docs/performance.md, "Figures behind the code's choices")."""
    rng = np.random.default_rng(0)
    mb = np.median(lb[rng.integers(0, len(lb), (draws, len(lb)))], axis=1)
    mn = np.median(ln[rng.integers(0, len(ln), (draws, len(ln)))], axis=1)
    return float(np.std(mn - mb, ddof=1))


def cases(
    base: pd.DataFrame,
    new: pd.DataFrame,
    rule: Rule = Rule(),
    *,
    shift: float | None = None,
    run_sigma: float | None = None,
) -> pd.DataFrame:
    """One row per case of either run: status faster / slower / unchanged / new / missing / failed /
    fixed / untested / skipped, with the ratio new/base, its 95% interval, p and the BH q-value.

    The test is against two sources of noise: between processes within a run (each case's own
    spread) and between runs (each case moving by its own few percent from one run to the next,
    estimated by the Qn scale of the grid's changes; at least MIN_RUN_SIGMA). The grid's common move
    (`grid_shift`, the shortest half's midpoint) is subtracted when it is under the effect floor
    (drift between runs); at the floor or beyond it is a finding and every case is tested on its
    whole change, unless `rule.allow_shift` (`applied_shift` says which).
    """
    b, n = base.set_index("case_id"), new.set_index("case_id")
    records = [
        _pair(case_id, b.loc[case_id] if case_id in b.index else None, n.loc[case_id] if case_id in n.index else None)
        for case_id in list(b.index) + [c for c in n.index if c not in b.index]
    ]
    out = pd.DataFrame.from_records(records)
    return _test(out, rule, shift, run_sigma)


def _pair(case_id: str, row_b: pd.Series | None, row_n: pd.Series | None) -> dict:
    """One case's record before the grid-wide test: its status so far, change of log time and se."""
    label = (row_n if row_n is not None else row_b).reindex(LABEL).to_dict()  # NB: a table without kv_len: NaN
    record = {
        "case_id": case_id,
        **label,
        "ratio": np.nan,
        "ratio_lo": np.nan,
        "ratio_hi": np.nan,
        "p": np.nan,
        "base_time_s": np.nan,
        "new_time_s": np.nan,
        "change": np.nan,
        "se": np.nan,
        "reason": "",
    }
    if row_n is None:
        return {**record, "status": "missing", "reason": BLOCKING["missing"]}
    if row_b is None:
        return {**record, "status": "new", "reason": BLOCKING["new"]}
    if row_b["status"] != "ok" or row_n["status"] != "ok":
        return {**record, **_not_ok(row_b, row_n)}
    (tb, kind_b), (tn, kind_n) = timings(row_b), timings(row_n)
    record.update(base_time_s=row_b["time_s"], new_time_s=row_n["time_s"])
    if len(tb) < 2 or len(tn) < 2:
        return {**record, "status": "untested", "reason": BLOCKING["untested"]}
    change, se = log_change(tb, tn)
    return {
        **record,
        "change": change,
        "se": se,
        "status": "tested",
        "reason": ""
        if kind_b == kind_n == "processes"
        else "tested on samples of one process: between-process noise is not in the test",
    }


def _test(out: pd.DataFrame, rule: Rule, shift: float | None, run_sigma: float | None) -> pd.DataFrame:
    """The grid-wide test of the tested cases: shift, run noise, p, BH q, and the status.

    `shift` and `run_sigma` are the first pass's when a re-run of flagged cases is judged: never
    re-estimated from the flagged subset, which would remove a regression shared by many cases.
    """
    tested = out["status"] == "tested"
    out["q"] = np.nan
    out.attrs.update(grid_shift=0.0, applied_shift=0.0, run_sigma=MIN_RUN_SIGMA, tested=int(tested.sum()))
    if not tested.any():
        return out
    change = out.loc[tested, "change"]
    estimate = tested.sum() >= MIN_CASES_FOR_SHIFT
    centre = shorth_midpoint(change.to_numpy()) if estimate else 0.0
    if shift is None:  # a shift of the floor or more is a finding (tested as it is) unless allowed
        called = abs(centre) >= math.log1p(rule.effect_floor) and not rule.allow_shift
        shift = 0.0 if called else centre
    sigma = run_sigma
    if sigma is None:  # NB: Qn, not MAD: with half the grid moved, the MAD is the move itself
        sigma = max(MIN_RUN_SIGMA, float(qn_scale(change.to_numpy() - centre))) if estimate else MIN_RUN_SIGMA
    residual = change - shift
    total = np.sqrt(out.loc[tested, "se"] ** 2 + sigma**2)
    out.loc[tested, "p"] = 2 * stats.norm.sf(np.abs(residual / total))
    out.loc[tested, "ratio"] = np.exp(change)
    out.loc[tested, "ratio_lo"] = np.exp(change - 1.96 * total)
    out.loc[tested, "ratio_hi"] = np.exp(change + 1.96 * total)
    out.loc[tested, "q"] = stats.false_discovery_control(out.loc[tested, "p"].to_numpy(), method="bh")
    out.attrs.update(grid_shift=centre, applied_shift=shift, run_sigma=sigma)
    return status(out, tested, rule)


def shorth_midpoint(x: np.ndarray) -> float:
    """The middle of the shortest interval holding half the values: where most cases moved together.
    Unlike the median it sits in one group when the grid splits in two (half the cases 8% slower),
    so a split grid is tested either against the unmoved group or as a shift."""
    x = np.sort(x)
    h = (len(x) + 1) // 2
    widths = x[h - 1 :] - x[: len(x) - h + 1]
    i = int(np.argmin(widths))
    return float((x[i] + x[i + h - 1]) / 2)


def status(out: pd.DataFrame, tested: pd.Series, rule: Rule) -> pd.DataFrame:
    """Slower / faster / unchanged from q, the change beyond the applied shift, and the effect floor."""
    shift = out.attrs.get("applied_shift", 0.0)
    significant = tested & (out["q"] <= rule.alpha)
    out.loc[tested, "status"] = "unchanged"
    out.loc[significant & (out["change"] > shift) & (out["ratio"] >= 1 + rule.effect_floor), "status"] = "slower"
    out.loc[significant & (out["change"] < shift) & (out["ratio"] <= 1 / (1 + rule.effect_floor)), "status"] = "faster"
    return out


def _not_ok(row_b: pd.Series, row_n: pd.Series) -> dict:
    return not_ok(row_b["status"], row_b["reason"], row_n["status"], row_n["reason"])


def not_ok(sb: str, rb: str, sn: str, rn: str, where: tuple[str, str] = ("in the baseline", "now")) -> dict:
    """Status and reason of a case not ok on a side: (status, reason) of base and new; `where`
    names the two sides (a stored baseline and now, or side A and side B of `suite ab`)."""
    if sb == sn:  # skipped in both, or the same failure in both (a known out-of-memory): nothing changed
        return {"status": "skipped" if sb == "skipped" else "unchanged", "reason": f"{sb} in both: {rn}"}
    if sb == "ok":
        return {"status": "failed", "reason": f"{BLOCKING['failed']}: {sn}: {rn}"}
    if sn == "ok":
        return {"status": "fixed", "reason": f"{sb} {where[0]} ({rb}), ok {where[1]}"}
    return {"status": "failed", "reason": f"{sb} {where[0]}, {sn} {where[1]}: {rn}"}


def exponents(
    base: pd.DataFrame, new: pd.DataFrame, rule: Rule = Rule(), hosts: tuple[dict, dict] = ({}, {})
) -> pd.DataFrame:
    """Fitted time exponents in n of both runs, joined per series: drift and verdict change flagged.
    `hosts`: each run's cache steps (suite.analyse.terms.machines); the work's fits beside the time's
    (a path whose counted FLOPs grow past its claim is refuted by them), so each verdict is its report's."""
    fb, fn = (_time_fits(frame, mine) for frame, mine in ((base, hosts[0]), (new, hosts[1])))
    if fb.empty or fn.empty:
        return pd.DataFrame(columns=["series", "drift", "verdict_change"])
    keys = [c for c in SHAPE if c != "seq_len"]
    cols = ["slope", "lo", "hi", "verdict", "claimed", "series"]
    both = fb[keys + cols].merge(fn[keys + cols], on=keys + ["series", "claimed"], suffixes=("_base", "_new"))
    apart = (both["lo_new"] > both["hi_base"]) | (both["hi_new"] < both["lo_base"])
    change = both["slope_new"] - both["slope_base"]
    both["drift"] = np.where(
        apart & (change > rule.exponent_drift),
        "steeper",
        np.where(apart & (change < -rule.exponent_drift), "flatter", ""),
    )
    both["verdict_change"] = np.where(
        both["verdict_base"] != both["verdict_new"], both["verdict_base"] + " → " + both["verdict_new"], ""
    )
    return both


def _time_fits(frame: pd.DataFrame, hosts: dict) -> pd.DataFrame:
    fits = fit_exponents(frame, "seq_len", ("time", "flops", "work"), hosts=hosts)
    return fits[fits["metric"] == "time"] if not fits.empty else fits


def env_differences(env_base: dict, env_new: dict) -> list[str]:
    return [
        f"{key}: {env_base.get(key)!r} vs {env_new.get(key)!r}"
        for key in STABLE_ENV
        if env_base.get(key) != env_new.get(key)
    ]


@dataclass
class Verdict:
    code: int  # 0 no regression, 1 confirmed regression, 2 cannot judge
    reasons: list[str]
    cases: pd.DataFrame
    exponents: pd.DataFrame
    env: list[str]


def decide(
    base: pd.DataFrame,
    new: pd.DataFrame,
    env_base: dict,
    env_new: dict,
    rule: Rule = Rule(),
    force: bool = False,
    hosts: tuple[dict, dict] = ({}, {}),
) -> Verdict:
    """0 / 1 / 2 and why, for two stored runs; `hosts` as `exponents` takes them."""
    env = env_differences(env_base, env_new)
    table = cases(base, new, rule)
    return judge(table, exponents(base, new, rule, hosts), env, rule, force)


def judge(table: pd.DataFrame, exps: pd.DataFrame, env: list[str], rule: Rule = Rule(), force: bool = False) -> Verdict:
    """The one exit-code rule: 2 when the environments differ (unless forced); else 1 when any
    regression is found, even beside cases that cannot be judged; else 2 when a case cannot be
    judged (missing, failed, untested, or new without --allow-new); else 0."""
    reasons = []
    shift, slower = table.attrs.get("grid_shift", 0.0), table[table["status"] == "slower"]
    supported = table.attrs.get("grid_shift_p", 0.0) <= rule.alpha  # ab tests its move over the pairs
    if shift >= math.log1p(rule.effect_floor) and supported and not rule.allow_shift:
        reasons.append(
            f"the whole grid is slower: the median case by {math.expm1(shift):.1%}, {len(slower)} of "
            f"{table.attrs.get('tested', 0)} cases called slower "
            + (
                "(interleaved: drift cancels, so this is the code)"
                if table.attrs.get("interleaved")
                else "(shared code, or a slower machine: `suite ab` tells them apart; --allow-shift tests each "
                "case beyond the shift)"
            )
        )
    for _, row in slower.iterrows():
        confirmed = " (confirmed by a re-run)" if "confirmed" in str(row.get("reason", "")) else ""
        reasons.append(
            f"slower{confirmed}: {case_label(row)} ×{row['ratio']:.3f} [{row['ratio_lo']:.3f}, "
            f"{row['ratio_hi']:.3f}], q = {row['q']:.2g}"
        )
    for _, row in exps[exps["drift"] == "steeper"].iterrows():
        reasons.append(
            f"exponent drift: {row['variant']}/{row['series']} n^{row['slope_base']:.2f} → n^{row['slope_new']:.2f}"
        )
    for _, row in exps[exps["verdict_change"] == "confirmed → refuted"].iterrows():
        reasons.append(f"verdict change: {row['variant']}/{row['series']} confirmed → refuted")
    blocking = [s for s in BLOCKING if not (s == "new" and rule.allow_new)]
    unjudged = table[table["status"].isin(blocking)]
    cannot = [f"{row['status']}: {case_label(row)}: {row['reason']}" for _, row in unjudged.iterrows()]
    if env and not force:
        return Verdict(
            2,
            ["environments differ (compare only within one fingerprint, or --force): " + "; ".join(env)],
            table,
            exps,
            env,
        )
    if reasons:
        return Verdict(1, reasons, table, exps, env)
    if cannot:
        return Verdict(2, cannot, table, exps, env)
    return Verdict(0, [], table, exps, env)


def reconfirm(verdict: Verdict, still_slower: set[str], rule: Rule = Rule(), force: bool = False) -> Verdict:
    """The verdict after a confirming re-run: flagged cases not slower again become `unconfirmed`;
    then the same rule as the first pass decides."""
    table = verdict.cases.copy()
    table.attrs.update(verdict.cases.attrs)
    slower = table["status"] == "slower"
    gone = slower & ~table["case_id"].isin(still_slower)
    table.loc[gone, "reason"] = "slower at first, not in the confirming re-run"
    table.loc[gone, "status"] = "unconfirmed"
    table.loc[slower & ~gone, "reason"] = "confirmed by a re-run"
    return judge(table, verdict.exponents, verdict.env, rule, force)


def case_label(row) -> str:
    params = "" if row["params"] in (None, "{}") else f" {row['params']}"
    kv_len = row.get("kv_len")
    n = f"n={row['seq_len']}" + (f" n_k={int(kv_len)}" if kv_len is not None and kv_len == kv_len else "")
    return (
        f"{row['variant']}/{row['impl']} {row['device']} {row['dtype']} {row['mode']} {n} "
        f"H={row['num_heads']}/{row['num_kv_heads']} d={row['head_dim']}{' causal' if row['causal'] else ''}{params}"
    )
