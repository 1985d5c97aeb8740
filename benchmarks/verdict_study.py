"""How often the cost-model verdict (suite.analyse.cost) is right on series whose truth is planted
(suite.analyse.planted): the claim confirmed when nothing above it is planted, and a higher term
caught when one is, by host (cache sizes), noise and the planted term's share of the largest
length's time, over the full grid's span (256..65536, doubling, with midpoints). The path rows plant
an implementation's own change of path (its claim's term at twice or half the rate from n = 16384 on,
as fixed/native's tile), told to the model as the sweep records it (declared) or not, with the steps
mid-span and 1% noise.

    python benchmarks/verdict_study.py [--count 100] [--out benchmarks/verdict_study.csv]

Writes one row per (hosts, noise, claims, share, path, kind, host, claim, verdict) with its count, and
prints the rates. Seeded: the same command writes the same file.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from suite.analyse.planted import MID_SPAN, study  # noqa: E402

HOST_SETS = {"L2 and L3 (L3 at the top length)": ("amd", "intel"), "L2 only (steps mid-span)": tuple(MID_SPAN)}
CELLS = (("every claim, higher term 30%", (1.0, 1.5, 2.0), 0.3), ("O(n), n^2 10%", (1.0,), 0.1))
NOISES = (0.01, 0.02)
PATHS = {
    "none": None,
    **{
        f"{speed} from 16384, {told}": ((16384, factor), told == "declared")
        for speed, factor in (("x2 slower", 2.0), ("x2 faster", 0.5))
        for told in ("declared", "undeclared")
    },
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=100, help="series per host, claim and kind")
    parser.add_argument("--out", default=str(Path(__file__).with_name("verdict_study.csv")))
    args = parser.parse_args()
    rows = []
    cells = [
        (hosts_name, hosts, noise, cell, claims, share, "none")
        for hosts_name, hosts in HOST_SETS.items()
        for noise in NOISES
        for cell, claims, share in CELLS
    ]
    cells += [
        ("L2 only (steps mid-span)", tuple(MID_SPAN), 0.01, cell, claims, share, path)
        for path in list(PATHS)[1:]
        for cell, claims, share in CELLS
    ]
    for hosts_name, hosts, noise, cell, claims, share, path in cells:
        planted, declared = PATHS[path] or (None, True)
        result = study(
            args.count, noise=noise, higher_share=share, claims=claims, hosts=hosts, path=planted, declared=declared
        )
        for kind, tally in result["tally"].items():
            for (host, claimed, verdict), count in tally.items():
                rows.append(
                    {
                        "caches": hosts_name,
                        "noise": noise,
                        "cell": cell,
                        "share": share,
                        "path": path,
                        "kind": kind,
                        "host": host,
                        "claimed": claimed,
                        "verdict": verdict,
                        "count": count,
                    }
                )
        print(
            f"{hosts_name}, noise {noise:.0%}, {cell}, path {path}: clean confirmed {result['confirmed_clean']:.1%}, "
            f"refuted {result['refuted_clean']:.1%}; planted caught {result['caught_planted']:.1%} "
            f"(refuted {result['refuted_planted']:.1%}), confirmed {result['confirmed_planted']:.1%}",
            flush=True,
        )
    pd.DataFrame(rows).to_csv(args.out, index=False)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
