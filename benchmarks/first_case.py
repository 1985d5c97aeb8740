"""A fresh process's first case, as a worker measures it: import torch and the suite, set up as a worker
does, then measure one FlexAttention case (its check against dense, its compile, its timing, its FLOP
count). Prints one JSON line of where the time went.

`benchmarks/gpu_session.sh coldwarm` runs it twice in fresh processes, with an empty compile cache and
then with the cache the first filled (TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR): the difference is
what a resumed run or a CI job saves per worker process by carrying the cache.

    python benchmarks/first_case.py --device cuda --dtype bfloat16 --seq-len 4096
"""

from __future__ import annotations

import time

STARTED = time.perf_counter()

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", default="sliding_window", help="a variant with a flex implementation")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--seq-len", type=int, default=4096)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--head-dim", type=int, default=64)
    args = parser.parse_args()

    import torch  # noqa: F401  (timed as the import a worker's fork server does)

    from suite.plan.case import Case
    from suite.plan.settings import Settings
    from suite.run.executors.worker import setup
    from suite.run.measurement.measure import measure

    settings = Settings(min_run_time_s=0.05, max_samples=20)
    setup(settings, [], args.device)
    imported = time.perf_counter()
    case = Case(
        args.variant,
        "flex",
        args.device,
        args.dtype,
        "fwd",
        1,
        args.seq_len,
        args.heads,
        args.heads,
        args.head_dim,
        False,
    )
    row = measure(case, settings)
    done = time.perf_counter()
    print(
        json.dumps(
            {
                "case": case.label(),
                "status": row.status,
                "reason": row.reason[:200],
                "import_s": round(imported - STARTED, 2),
                "measure_s": round(done - imported, 2),
                "setup_s": row.setup_s,
                "time_s": row.time_s,
                "cache": {name: os.environ.get(name) for name in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")},
            }
        )
    )


if __name__ == "__main__":
    main()
