"""Old against new from gpu_profile.py's files, as the table in docs/performance.md: every round's median, the ratio
of the medians of the rounds, kernels launched, the share of the call the kernels were busy, and the
useful TFLOP/s (the theory's FLOPs over the new median).

    python benchmarks/gpu_profile_compare.py --old a.json,b.json --new c.json,d.json
"""

from __future__ import annotations

import argparse
import json
import statistics

from suite.plan.case import Case, theory_of


def rows(files: str) -> list[dict]:
    return [{(r["variant"], r["impl"], r["mode"]): r for r in json.load(open(f))} for f in files.split(",")]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--old", required=True)
    parser.add_argument("--new", required=True)
    args = parser.parse_args()
    old, new = rows(args.old), rows(args.new)
    print(
        "| path | mode | old ms (rounds) | new ms (rounds) | new/old | kernels old → new | kernels busy, new | "
        "useful TFLOP/s, new |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for key in old[0]:
        o = [s[key]["median_ms"] for s in old if "median_ms" in s.get(key, {})]
        n = [s[key]["median_ms"] for s in new if "median_ms" in s.get(key, {})]
        if not o or not n:
            continue
        last = next(s[key] for s in new if key in s)
        variant, impl, mode = key
        flops = theory_of(
            Case(
                variant,
                impl,
                "cuda",
                last["dtype"],
                mode,
                1,
                last["n"],
                last["heads"],
                last.get("kv_heads", last["heads"]),
                64,
                False,
            )
        )["flops"]
        mid = statistics.median(n)
        print(
            f"| {variant}/{impl} | {mode} | {', '.join(f'{x:.1f}' for x in o)} | {', '.join(f'{x:.1f}' for x in n)} "
            f"| {mid / statistics.median(o):.2f} | {old[0][key].get('kernels', '—')} → {last.get('kernels', '—')} "
            f"| {100 * last.get('kernel_ms', float('nan')) / mid:.0f}% | {flops / mid / 1e9:.2f} |"
        )


if __name__ == "__main__":
    main()
