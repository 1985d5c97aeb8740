"""How often the cost-model verdict is right on series of random gathers whose truth is planted
(suite.analyse.planted.gather_study): an O(n) series whose time per row follows a measured rate of the gather
probe (runs of suite.machine.gathers, each in its own process): the fastest of 3 runs drawn at random, as a
case's time is the fastest over its 3 processes, fitted with the fastest of 3 others, as a run's report fits the
probe its 3 workers took; and, for comparison, the same series fitted with the cache steps alone (the model
before the gathers' term). Two sets of probe runs (benchmarks/gather_probes.py writes them):
tests/data/gather-probes/probes.json (nine, to n = 65536) and probes_long.json (twelve, to 262144), on which a
series whose higher term's test sits at its level also climbs a doubling at a time, as the ladder does (suite.run.settle; the higher term's share is of the
time at 65536 throughout).

    python benchmarks/gather_study.py [--count 300] [--out benchmarks/gather_study.csv]

Each cell plants `count` series (as measured: not made monotone), 1% noise, over 256-65536. Writes one row per
(probes, planted, model, verdict) with its count, and prints the rates. Seeded: the same command writes the same
file.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from suite.analyse.cost import judge  # noqa: E402
from suite.analyse.planted import HOSTS, STEP_MAX, gather_study, gathered, outcome  # noqa: E402
from suite.analyse.steps import machine  # noqa: E402
from suite.machine.gathers import fastest  # noqa: E402

CELLS = {"clean": (None, 0.0), "n^2 10%": (2.0, 0.1), "n^2 30%": (2.0, 0.3), "n^1.5 30%": (1.5, 0.3)}


def steps_only(probes: list[dict], count: int, higher, share, seed: int = 0) -> dict:
    """The same plants, fitted with the cache steps of this host kind and no gathers' term."""
    rng = np.random.default_rng(seed)
    tally: dict[str, int] = {}
    for _ in range(count):
        plant = fastest([probes[i] for i in rng.permutation(len(probes))[:3]])
        s = gathered(rng, plant, noise=0.01, higher=higher, higher_share=share)
        result = judge(s.x, s.y, 1.0, machine(s.working_set, HOSTS["amd"], STEP_MAX), bootstrap=0)
        key = outcome(result, higher)
        tally[key] = tally.get(key, 0) + 1
    return tally


PROBES = {"nine runs to 65536": "probes.json", "twelve runs to 262144": "probes_long.json"}
STORED = Path(__file__).resolve().parent.parent / "tests" / "data" / "gather-probes"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=300, help="series per cell")
    parser.add_argument("--out", default=str(Path(__file__).with_name("gather_study.csv")))
    args = parser.parse_args()
    rows = []
    for label, name in PROBES.items():
        probes = json.loads((STORED / name).read_text())["runs"]
        reach = min(r["lengths"][-1] for r in probes)
        for cell, (higher, share) in CELLS.items():
            study = gather_study(probes, args.count, higher=higher, higher_share=share, climb=reach > 65536)
            models = {
                "the gathers' rate": study["first"],
                "cache steps only": steps_only(probes, args.count, higher, share),
            }
            if reach > 65536:  # the same series, climbing as the ladder does where the test sits at its level
                models["the gathers' rate, climbing"] = study["tally"]
                print(f"{label:22s} {cell:10s} climbed: {study['climbed']:.1%} of the series", flush=True)
            else:  # for comparison: each series fitted with the probe it was planted with
                models["the plant's own probe"] = gather_study(
                    probes, args.count, higher=higher, higher_share=share, same=True
                )["tally"]
            for model, tally in models.items():
                total = sum(tally.values())
                rows += [
                    {"probes": label, "planted": cell, "model": model, "verdict": v, "count": c}
                    for v, c in sorted(tally.items())
                ]
                print(
                    f"{label:22s} {cell:10s} {model:28s} "
                    + ", ".join(f"{v} {c / total:.1%}" for v, c in sorted(tally.items())),
                    flush=True,
                )
    pd.DataFrame(rows).to_csv(args.out, index=False)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
