"""The `triton` paths' criteria (the issue that built them), read from gpu_profile.py's rows:
one PASS or FAIL line each, then the efficiency table (useful TFLOP/s: the theory's FLOPs over the
median). A criterion whose rows are missing or failed is a FAIL that says so.

    python benchmarks/triton_criteria.py PROFILE.json [...]     # exit 1 when one fails

    busy      kernels busy >= 80% of every triton call (summed kernel time of one profiled call / median)
    band      sliding_window and neighborhood at >= 0.9x FlexAttention's speed, each length and mode
    keys      random and bigbird >= 5x faster than FlexAttention at n = 65536, each mode
    exponent  random's and bigbird's triton time grows as n^1 (least-squares slope within 1 ± 0.15)
    linear    linear causal within 2x of flash-linear-attention's chunk kernel (fla-core), each length and mode
    check     every triton row within the issue's tolerance of dense float64 (output 1e-5; with gradients 1e-4)
"""

from __future__ import annotations

import json
import math
import sys

from suite.plan.case import Case, theory_of

BUSY, BAND, KEYS, SLOPE, LINEAR = 0.8, 0.9, 5.0, 0.15, 2.0
TOL = {"fwd": 1e-5, "fwd_bwd": 1e-4}


def _key(row) -> tuple:
    return row["variant"], row["impl"], row.get("causal", False), row["n"], row["mode"]


def _ms(rows: dict, variant, impl, causal, n, mode):
    row = rows.get((variant, impl, causal, n, mode))
    return None if row is None or "median_ms" not in row else row["median_ms"]


def _ratio_lines(name, rows, pairs, least) -> list[tuple[str, bool, str]]:
    """speed ratios other/triton >= least for (variant, other impl, causal, n, mode) pairs."""
    out = []
    for variant, other, causal, n, mode in pairs:
        ours, theirs = _ms(rows, variant, "triton", causal, n, mode), _ms(rows, variant, other, causal, n, mode)
        label = f"{variant} {'causal ' if causal else ''}n={n} {mode}"
        if ours is None or theirs is None:
            out.append((name, False, f"{label}: a row is missing or failed (triton {ours}, {other} {theirs})"))
            continue
        out.append(
            (
                name,
                theirs / ours >= least,
                f"{label}: {other} {theirs:.3f} ms / triton {ours:.3f} ms = {theirs / ours:.2f} (need >= {least:g})",
            )
        )
    return out


def _pairs(triton: list[dict], names, other: str, causal: bool, modes) -> list[tuple]:
    """(variant, other impl, causal, n, mode) for every length the triton rows of `names` were timed at;
    with none, the pairs of the issue's lengths (so that their absence is a FAIL line)."""
    found = sorted(
        {(r["variant"], r["n"]) for r in triton if r["variant"] in names and r.get("causal", False) == causal}
    )
    found = found or [(v, n) for v in names for n in (16384, 65536)]
    return [(v, other, causal, n, m) for v, n in found for m in modes]


def slope(points: list[tuple[int, float]]) -> float:
    """Least-squares slope of log(ms) on log(n)."""
    xs, ys = [math.log(n) for n, _ in points], [math.log(t) for _, t in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def criteria(all_rows: list[dict]) -> list[tuple[str, bool, str]]:
    rows = {_key(r): r for r in all_rows}
    triton = [r for r in all_rows if r["impl"] == "triton"]
    modes = sorted({r["mode"] for r in triton})
    out = []
    for r in triton:
        label = f"{r['variant']}{' causal' if r.get('causal') else ''} n={r['n']} {r['mode']}"
        if "error" in r or "median_ms" not in r:
            out.append(("busy", False, f"{label}: {r.get('error', 'not timed')}"))
        elif "kernel_ms" in r:
            share = r["kernel_ms"] / r["median_ms"]
            out.append(("busy", share >= BUSY, f"{label}: kernels {share:.0%} of the call ({r['kernels']} kernels)"))
        if "check_error" in r:
            tol = TOL[r["mode"]]
            out.append(
                (
                    "check",
                    r["check_error"] <= tol,
                    f"{label}: {r['check_error']:.2e} at n={r['check_n']} (tolerance {tol:g})",
                )
            )
    out += _ratio_lines("band", rows, _pairs(triton, ("sliding_window", "neighborhood"), "flex", False, modes), BAND)
    out += _ratio_lines(
        "keys", rows, [(v, "flex", False, 65536, m) for v in ("random", "bigbird") for m in modes], KEYS
    )
    for variant in ("random", "bigbird"):
        for mode in modes:
            points = sorted(
                (n, t)
                for (v, i, c, n, m), r in rows.items()
                if (v, i, c, m) == (variant, "triton", False, mode)
                for t in [r.get("median_ms")]
                if t
            )
            if len(points) < 2:
                out.append(("exponent", False, f"{variant} {mode}: {len(points)} timed lengths (need 2 or more)"))
                continue
            b = slope(points)
            out.append(
                (
                    "exponent",
                    abs(b - 1) <= SLOPE,
                    f"{variant} {mode}: time ~ n^{b:.2f} over n = "
                    f"{', '.join(str(n) for n, _ in points)} (need 1 ± {SLOPE})",
                )
            )
    out += _ratio_lines("linear", rows, _pairs(triton, ("linear",), "fla-core", True, modes), 1 / LINEAR)
    return out


def efficiency(all_rows: list[dict]) -> list[str]:
    """Markdown rows: useful TFLOP/s of every timed triton row (the theory's FLOPs, not the kernels')."""
    lines = ["| path | mode | n | ms | kernels busy | useful TFLOP/s |", "|---|---|---|---|---|---|"]
    for r in all_rows:
        if r["impl"] != "triton" or "median_ms" not in r:
            continue
        case = Case(
            r["variant"],
            r["impl"],
            "cuda",
            r["dtype"],
            r["mode"],
            1,
            r["n"],
            r["heads"],
            r.get("kv_heads", r["heads"]),
            64,
            r.get("causal", False),
        )
        flops = theory_of(case)["flops"]
        busy = f"{r['kernel_ms'] / r['median_ms']:.0%}" if "kernel_ms" in r else "—"
        lines.append(
            f"| {r['variant']}/triton{' causal' if r.get('causal') else ''} | {r['mode']} | {r['n']} | "
            f"{r['median_ms']:.3f} | {busy} | {flops / r['median_ms'] / 1e9:.2f} |"
        )
    return lines


def report(all_rows: list[dict]) -> bool:
    """Print the criteria's lines and the efficiency table; True when every line passes."""
    lines = criteria(all_rows)
    for name, ok, detail in lines:
        print(f"{'PASS' if ok else 'FAIL'} {name:8s} {detail}")
    print()
    print("\n".join(efficiency(all_rows)))
    return all(ok for _, ok, _ in lines)


if __name__ == "__main__":
    rows = [r for path in sys.argv[1:] for r in json.load(open(path))]
    sys.exit(0 if report(rows) else 1)
