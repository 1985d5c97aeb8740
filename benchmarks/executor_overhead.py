"""Wall time of a run and the executor's overhead per case, from its journal.

    python -m suite run --grid smoke --run-id smoke-local --no-report
    python -m suite run --grid smoke --run-id smoke-ray --no-report --executor ray --ray-workers 2
    python benchmarks/executor_overhead.py results/smoke-local:1 results/smoke-ray:2

Wall: from the first case's start to the last case's end (journal timestamps; the executor's own
start-up, worker or Ray, is reported apart from the driver's log). Overhead per case: the slots'
time not spent inside `measure` (its wall_s), over the rows: (slots × wall − Σ wall_s) / rows —
dispatch, result transfer, journal, idle slots at the end.
"""

from __future__ import annotations

import sys

from suite.store.rundir import RunDir


def main(args: list[str]) -> None:
    """RUN[:SLOTS]...: SLOTS is the number of processes measuring at once (1 locally without
    replicates; --ray-workers under Ray); by default the distinct measuring processes seen."""
    for arg in args:
        run_dir, _, given = arg.partition(":")
        run = RunDir(run_dir)
        rows = run.journal.read().rows
        timed = [r for r in rows if r.wall_s is not None]
        began = min(r.finished_at - r.wall_s for r in timed)
        wall = max(r.finished_at for r in rows) - began
        slots = int(given) if given else (len({r.pid for r in timed if r.pid}) or 1)
        busy = sum(r.wall_s for r in timed)
        overhead = (slots * wall - busy) / len(rows)
        plan = run.plan()
        print(
            f"{run_dir}: grid {plan.get('grid')}, {len(rows)} rows, {slots} measuring processes, "
            f"wall {wall:.1f}s, in measure {busy:.1f}s, overhead {overhead * 1e3:.0f} ms per row"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
