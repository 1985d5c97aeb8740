"""Judge an interleaved A/B sweep (suite.run.ab.driver): per case, a paired test over the process pairs.

Each pair p of processes timed the case in blocks A, B, B, A; its difference is
d_p = mean log(B blocks) − mean log(A blocks), in which a drift linear over the four blocks cancels.
The pairs' processes differ, so the spread of d_p over the P pairs carries the between-process
noise. The test is Yuen's trimmed-mean t on the d_p (a pair whose process fell into a slow mode
does not decide alone), its variance moderated towards the grid's (empirical Bayes: the prior's
degrees of freedom add to the case's own), p-values corrected over the grid by Benjamini–Hochberg,
and a change is called only at the effect floor or beyond (the same `regression.status` as
`compare`). No grid shift is removed: a change of every case is a regression of
every case. The grid's common move blocks by itself when the median case moved by the floor or more
and the pairs agree on it (`grid_move`).
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
from scipy import stats
from scipy.stats import mstats

from suite.analyse import regression
from suite.analyse.regression import BLOCKING, LABEL

MIN_PAIR_SD = 0.005  # pairs never agree better than 0.5% (log time): a floor against a zero spread
TRIM = 0.2  # Yuen's trimmed mean: a pair with one process in a slow mode (bimodal cases) does not lead


def blocks(lines: list[dict]) -> pd.DataFrame:
    """The journal's lines as a long-form table: one row per (case, side, pair, position)."""
    frame = pd.DataFrame.from_records(lines)
    if frame.empty:
        return pd.DataFrame(columns=["case_id", "side", "pair", "position", "status", "reason", "time_s", *LABEL])
    frame["params"] = frame["params"].map(lambda p: json.dumps(p or {}, sort_keys=True))
    for column in frame.columns:  # NB: dicts (setup, notes) as JSON text, as in the run's table
        if column != "params" and frame[column].map(lambda x: isinstance(x, dict)).any():
            frame[column] = frame[column].map(lambda x: json.dumps(x, sort_keys=True) if isinstance(x, dict) else x)
    return frame


def cases(frame: pd.DataFrame, rule: regression.Rule = regression.Rule(), moderated: bool = True) -> pd.DataFrame:
    """One row per case, with the columns and statuses of `regression.cases`.

    `moderated`: each case's variance of d_p shrunk towards the grid's (empirical Bayes, `prior`),
    which adds the prior's degrees of freedom to the t-test; without it, plain Student's t.
    """
    records = [_case(case_id, group) for case_id, group in frame.groupby("case_id", sort=False)]
    out = pd.DataFrame.from_records(records)
    out["q"] = np.nan
    tested = out["status"] == "tested"
    if tested.any():
        sub = out.loc[tested]
        test = ttest(
            sub["change"].to_numpy(float),
            sub["var"].to_numpy(float),
            sub["pairs"].to_numpy(float),
            sub["df"].to_numpy(float),
            moderated,
        )
        for column in ("se", "p", "q", "ratio_lo", "ratio_hi"):
            out.loc[tested, column] = test[column]
        d0, s0 = test["prior"]
    else:
        d0, s0 = 0.0, 0.0
    move, move_p = grid_move(frame, out.loc[tested, ["case_id", "change"]])
    out.attrs.update(
        grid_shift=move,
        grid_shift_p=move_p,
        applied_shift=0.0,
        run_sigma=0.0,
        tested=int(tested.sum()),
        interleaved=True,
        prior_df=float(min(d0, 1e6)),
        prior_sd=float(np.sqrt(s0)),
    )
    return regression.status(out, tested, rule)


def grid_move(frame: pd.DataFrame, tested: pd.DataFrame) -> tuple[float, float]:
    """(the median case's change, its p): per pair, the median over the tested cases of d_p, then a
    t-test over the pairs, so a common move counts only when the pairs agree on it (interleaving has
    already cancelled drift). (0, 1) with fewer than `regression.MIN_CASES_FOR_SHIFT` cases, as in
    `compare`: two cases are no grid."""
    if len(tested) < regression.MIN_CASES_FOR_SHIFT:
        return 0.0, 1.0
    ids = set(tested["case_id"])
    per_case = {c: pd.Series(dict(_pair_differences(g))) for c, g in frame.groupby("case_id") if c in ids}
    per_pair = pd.DataFrame(per_case).median(axis=1, skipna=True).to_numpy()  # [pairs]
    median = float(tested["change"].median())
    if len(per_pair) < 2:
        return median, 1.0
    if np.ptp(per_pair) == 0:  # every pair agrees exactly
        return median, float(per_pair[0] == 0)
    return median, float(stats.ttest_1samp(per_pair, 0.0).pvalue)


def calls(
    mean: np.ndarray,
    var: np.ndarray,
    n: np.ndarray,
    df: np.ndarray,
    rule: regression.Rule = regression.Rule(),
    moderated: bool = True,
) -> np.ndarray:
    """Slower / faster / unchanged per case from `estimate`'s figures: `cases`' decision on bare
    arrays (benchmarks/ab_power.py draws thousands of them)."""
    test = ttest(mean, var, n, df, moderated)
    out = pd.DataFrame({"change": mean, "ratio": np.exp(mean), "q": test["q"], "status": "tested"})
    return regression.status(out, out["status"] == "tested", rule)["status"].to_numpy()


def estimate(d: np.ndarray) -> tuple[float, float, float]:
    """(centre, variance, degrees of freedom) of one case's d_p: Yuen's 20%-trimmed mean, with n times
    the squared standard error from the Winsorized variance, and n − 2g − 1 degrees of freedom (g
    pairs trimmed from each end); the plain mean and variance when nothing is trimmed (n < 5)."""
    n, g = len(d), int(TRIM * len(d))
    if g == 0:
        return float(d.mean()), max(float(d.var(ddof=1)), MIN_PAIR_SD**2), n - 1.0
    se = float(mstats.trimmed_stde(d, limits=(TRIM, TRIM)))
    return float(stats.trim_mean(d, TRIM)), max(n * se**2, MIN_PAIR_SD**2), n - 2.0 * g - 1


def ttest(mean: np.ndarray, var: np.ndarray, n: np.ndarray, df: np.ndarray, moderated: bool = True) -> dict:
    """The (moderated) t-test of each case's centre over its n pairs, vectorised; q by BH.

    `moderated`: each case's variance is shrunk towards the grid's prior (`prior`), whose degrees of
    freedom add to the case's own; plain Student's t otherwise (or with fewer than 3 cases).
    """
    d0, s0 = prior(var, df) if moderated and len(var) >= 3 else (0.0, 0.0)
    if d0 == 0:
        post, total_df = var, df
    elif np.isinf(d0):
        post, total_df = np.full_like(var, s0), df + 1e6
    else:
        post, total_df = (d0 * s0 + df * var) / (d0 + df), df + d0
    se = np.sqrt(post / n)
    p = 2 * stats.t.sf(np.abs(mean) / se, total_df)
    half = stats.t.ppf(0.975, total_df) * se
    return {
        "se": se,
        "p": p,
        "q": stats.false_discovery_control(p, method="bh"),
        "ratio_lo": np.exp(mean - half),
        "ratio_hi": np.exp(mean + half),
        "prior": (d0, s0),
    }


def prior(var: np.ndarray, df: np.ndarray) -> tuple[float, float]:
    """(d0, s0²): the scaled inverse-χ² prior of the cases' variances, by the method of moments on
    log variances (Smyth 2004, "Linear models and empirical Bayes methods for assessing differential
    expression", the estimator of limma's fitFDist). d0 = ∞ when the variances scatter no more than
    their sampling alone would make them; small when the cases' noise really differs."""
    from scipy.special import digamma, polygamma

    var = np.maximum(var, MIN_PAIR_SD**2)
    e = np.log(var) - digamma(df / 2) + np.log(df / 2)
    emean = float(e.mean())
    evar = float(((e - emean) ** 2).sum() / (len(e) - 1) - polygamma(1, df / 2).mean())
    if evar <= 0:
        return np.inf, float(np.exp(emean))
    d0 = 2 * _trigamma_inverse(evar)
    return float(d0), float(np.exp(emean + digamma(d0 / 2) - np.log(d0 / 2)))


def _trigamma_inverse(y: float) -> float:
    """x with trigamma(x) = y, by Newton's method from 0.5 + 1/y (as limma does)."""
    from scipy.special import polygamma

    if y > 1e7:
        return 1 / np.sqrt(y)
    if y < 1e-6:
        return 1 / y
    x = 0.5 + 1 / y
    for _ in range(50):
        tri = float(polygamma(1, x))
        step = tri * (1 - tri / y) / float(polygamma(2, x))
        x += step
        if -step / x < 1e-8:
            break
    return x


def _side_status(rows: pd.DataFrame) -> tuple[str | None, str]:
    if rows.empty:
        return None, ""
    bad = rows[rows["status"] != "ok"]
    if bad.empty:
        return "ok", ""
    first = bad.iloc[0]
    return first["status"], str(first["reason"])


def _case(case_id: str, group: pd.DataFrame) -> dict:
    label = group.iloc[0].reindex(LABEL).to_dict()
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
        "var": np.nan,
        "df": np.nan,
        "pairs": 0,
        "reason": "",
    }
    (sa, ra), (sb, rb) = (_side_status(group[group["side"] == side]) for side in ("a", "b"))
    if sa == "absent":
        return {**record, "status": "new", "reason": BLOCKING["new"]}
    if sb == "absent":
        return {**record, "status": "missing", "reason": BLOCKING["missing"]}
    if sa is None or sb is None:
        return {**record, "status": "untested", "reason": "not timed on both sides"}
    if sa != "ok" or sb != "ok":
        return {**record, **regression.not_ok(sa, ra, sb, rb, where=("on side A", "on side B"))}
    return {**record, **_paired(group)}


def differences(group: pd.DataFrame) -> np.ndarray:
    """d_p per pair that has blocks of both sides: mean log B − mean log A."""
    return np.array([d for _, d in _pair_differences(group)])


def _pair_differences(group: pd.DataFrame) -> list[tuple[int, float]]:
    ok = group[group["status"] == "ok"] if "status" in group else group
    logs = ok.assign(log=np.log(ok["time_s"].astype(float)))
    means = logs.pivot_table(index="pair", columns="side", values="log", aggfunc="mean").dropna()
    if not {"a", "b"} <= set(means.columns):
        return []
    return list((means["b"] - means["a"]).items())


def _paired(group: pd.DataFrame) -> dict:
    d = differences(group)
    times = {side: float(np.median(group.loc[group["side"] == side, "time_s"])) for side in ("a", "b")}
    record = {"base_time_s": times["a"], "new_time_s": times["b"], "pairs": len(d)}
    if len(d) < 2:
        return {**record, "status": "untested", "reason": BLOCKING["untested"]}
    centre, var, df = estimate(d)
    return {**record, "status": "tested", "change": centre, "ratio": float(np.exp(centre)), "var": var, "df": df}


def verdict(frame: pd.DataFrame, rule: regression.Rule = regression.Rule()) -> regression.Verdict:
    """The gate's decision on a sweep, by the one exit-code rule (`regression.judge`)."""
    no_exponents = pd.DataFrame(columns=["series", "drift", "verdict_change"])
    return regression.judge(cases(frame, rule), no_exponents, [], rule)
