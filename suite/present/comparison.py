"""A comparison's rendering: Markdown for a PR comment or $GITHUB_STEP_SUMMARY, and JSON."""

from __future__ import annotations

import json
import math

import pandas as pd

from suite.analyse.regression import MIN_CASES_FOR_SHIFT, Rule, Verdict, case_label


def markdown(verdict: Verdict, base_name: str, new_name: str, rule: Rule = Rule()) -> str:
    """For a PR comment or $GITHUB_STEP_SUMMARY: the decision, flagged cases, then the counts."""
    title = {0: "no regression", 1: "**regression**", 2: "**cannot judge**"}[verdict.code]
    lines = [f"### `{new_name}` against `{base_name}`: {title} (exit {verdict.code})", ""]
    lines += [f"- {reason}" for reason in verdict.reasons] + ([""] if verdict.reasons else [])
    counts = verdict.cases["status"].value_counts()
    lines.append("Cases: " + ", ".join(f"{count} {status}" for status, count in counts.items()) + ".")
    lines.append(
        f"Rule: slower or faster when the Benjamini–Hochberg q ≤ {rule.alpha:g} over the grid and the "
        f"change is at least {rule.effect_floor:.0%}; ratio = new / base time, 95% interval. "
        + _shift_line(verdict.cases.attrs, rule)
    )
    lines.append("")
    shown = verdict.cases[~verdict.cases["status"].isin(["unchanged", "skipped"])]
    if not shown.empty:
        lines += ["| status | case | ratio [95% CI] | q | base | new | note |", "|---|---|---|---|---|---|---|"]
        for _, row in shown.iterrows():
            ratio = (
                "" if pd.isna(row["ratio"]) else f"{row['ratio']:.3f} [{row['ratio_lo']:.3f}, {row['ratio_hi']:.3f}]"
            )
            q = "" if pd.isna(row["q"]) else f"{row['q']:.2g}"
            lines.append(
                f"| {row['status']} | {case_label(row)} | {ratio} | {q} | {_ms(row['base_time_s'])} | "
                f"{_ms(row['new_time_s'])} | {row['reason']} |"
            )
        lines.append("")
    tested = verdict.cases[verdict.cases["ratio"].notna()].sort_values("ratio", ascending=False)
    if not tested.empty:
        lines += [
            f"<details><summary>All {len(tested)} tested cases, slowest change first</summary>",
            "",
            "| case | ratio [95% CI] | q | status |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {case_label(row)} | {row['ratio']:.3f} [{row['ratio_lo']:.3f}, {row['ratio_hi']:.3f}] | "
            f"{row['q']:.2g} | {row['status']} |"
            for _, row in tested.iterrows()
        ]
        lines += ["", "</details>", ""]
    moved = (
        verdict.exponents[(verdict.exponents["drift"] != "") | (verdict.exponents["verdict_change"] != "")]
        if not verdict.exponents.empty
        else verdict.exponents
    )
    if not verdict.exponents.empty:
        lines += [agreement_line(verdict.exponents), ""]
    if not moved.empty:
        lines += ["| exponent in n | base | new | drift | verdict |", "|---|---|---|---|---|"]
        for _, row in moved.iterrows():
            lines.append(
                f"| {row['variant']}/{row['series']} | {row['slope_base']:.2f} | {row['slope_new']:.2f} | "
                f"{row['drift']} | {row['verdict_change']} |"
            )
    return "\n".join(lines) + "\n"


def agreement_line(exponents: pd.DataFrame) -> str:
    """How many of the time exponents in n fitted in both runs got the same verdict."""
    alike = int((exponents["verdict_change"] == "").sum())
    return (
        f"Exponents in n fitted in both runs: {len(exponents)}; the same verdict in {alike} "
        f"({alike / len(exponents):.0%}); {int((exponents['drift'] != '').sum())} drifted beyond "
        f"the tolerance with disjoint intervals."
    )


def _shift_line(attrs: dict, rule: Rule) -> str:
    median, sigma = attrs.get("grid_shift", 0.0), attrs.get("run_sigma", float("nan"))
    if attrs.get("interleaved"):
        prior = attrs.get("prior_df", 0.0)
        test = (
            f"a paired t-test over the pairs, each case's variance shrunk towards the grid's (prior of "
            f"{prior:.0f} degrees of freedom)".replace("1000000 degrees", "∞ degrees")
            if prior
            else "a paired t-test over the pairs"
        )
        return (
            f"Interleaved A, B, B, A per process pair and {test}: drift cancels and nothing is subtracted. "
            f"Median change of the grid {math.expm1(median):+.1%}"
            + (
                f" (p = {attrs['grid_shift_p']:.2g} over the pairs' medians)."
                if attrs.get("tested", 0) >= MIN_CASES_FOR_SHIFT
                else f" (under {MIN_CASES_FOR_SHIFT} cases: no grid move is judged)."
            )
        )
    applied = attrs.get("applied_shift", 0.0)
    how = (
        (
            "each case tested beyond it"
            + (" (--allow-shift)" if rule.allow_shift else ": under the effect floor, taken as drift between the runs")
        )
        if applied
        else "each case tested on its whole change"
    )
    return (
        f"Common move of the grid {math.expm1(median):+.1%} ({how}); run-to-run noise per case ±{sigma:.1%} (log time)."
    )


def _ms(seconds) -> str:
    return "" if seconds is None or pd.isna(seconds) else f"{seconds * 1e3:.3f} ms"


def as_json(verdict: Verdict, base_name: str, new_name: str, rule: Rule = Rule()) -> dict:
    def records(frame: pd.DataFrame) -> list[dict]:  # via pandas' JSON: numpy scalars and NaN handled
        return json.loads(frame.to_json(orient="records")) if not frame.empty else []

    return {
        "base": base_name,
        "new": new_name,
        "exit_code": verdict.code,
        "reasons": verdict.reasons,
        "environment_differences": verdict.env,
        "rule": {
            "alpha": rule.alpha,
            "effect_floor": rule.effect_floor,
            "exponent_drift": rule.exponent_drift,
            "allow_shift": rule.allow_shift,
        },
        "grid": {key: float(value) for key, value in verdict.cases.attrs.items()},
        "counts": {k: int(v) for k, v in verdict.cases["status"].value_counts().items()},
        "cases": records(verdict.cases),
        "exponents": records(verdict.exponents),
    }
