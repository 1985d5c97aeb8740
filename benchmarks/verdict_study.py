"""How often the cost-model verdict (suite.analyse.cost) is right on series whose truth is planted
(suite.analyse.planted): the claim confirmed when nothing above it is planted, and a higher term
caught when one is, by host (cache sizes), noise, how memory-bound the series is, and the planted
term's share of the largest length's time.

    python benchmarks/verdict_study.py [--count 100] [--out benchmarks/verdict_study.csv]

Writes one row per (host, claim, noise, memory, share, kind, verdict) with its count; prints the
rates the issue asks for. Seeded: the same command writes the same file.
"""

from __future__ import annotations

import argparse
import itertools
import sys
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from suite.analyse.planted import lengths, study  # noqa: E402

NOISES = (0.01, 0.02, 0.03)
MEMORY = {"compute-bound": (0.05, 0.2), "mixed": (0.2, 0.5), "memory-bound": (0.5, 1.0)}
SHARES = (0.1, 0.3)
SPANS = {"256-65536": (256, 65536), "256-262144": (256, 262144)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=100, help="series per host, claim and kind")
    parser.add_argument("--out", default=str(Path(__file__).with_name("verdict_study.csv")))
    args = parser.parse_args()
    rows = []
    for (noise, (memory, bounds), share, (span, (low, high))) in itertools.product(
            NOISES, MEMORY.items(), SHARES, SPANS.items()):
        result = study(args.count, noise=noise, higher_share=share, memory=bounds, x=lengths(low, high))
        for kind, tally in result["tally"].items():
            for (host, claimed, verdict), count in tally.items():
                rows.append({"span": span, "noise": noise, "memory": memory, "share": share, "kind": kind,
                             "host": host, "claimed": claimed, "verdict": verdict, "count": count})
        print(f"span {span}, noise {noise:.0%}, {memory}, planted share {share:.0%}: "
              f"clean confirmed {result['confirmed_clean']:.1%}, refuted {result['refuted_clean']:.1%}; "
              f"planted caught {result['caught_planted']:.1%} (refuted {result['refuted_planted']:.1%}), "
              f"confirmed {result['confirmed_planted']:.1%}", flush=True)
    pd.DataFrame(rows).to_csv(args.out, index=False)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
