"""Run cases: each (case, process) goes to an executor, each finished row to the journal, then the table.

Isolation: a case that raises becomes a row in the worker; one that kills its worker (exit, crash,
the kernel's OOM killer) or overruns its time budget becomes a row from the executor, and a fresh
worker takes the next case. Nothing already measured is lost: the journal is appended and fsynced
per row, and `--resume` runs only the (case, process) pairs it does not hold. Executors: local
worker processes (suite.run.executors.local) or Ray actors (suite.run.executors.ray_pool), with one interface.
"""

from __future__ import annotations

import sys
import time
from collections import Counter
from dataclasses import replace

from suite.plan.case import Case
from suite.plan.grid import Grid
from suite.plan.ladder import Ladder
from suite.plan.plan import PLAN_FIELDS, Plan
from suite.plan.settings import Settings
from suite.run.env import fingerprint
from suite.run.outlook import Outlook, foresee, minutes, prices, probed
from suite.signals import stop_on_signals
from suite.store import table
from suite.store.row import UNFINISHED, Row
from suite.store.rundir import RunDir


def start(
    grid: Grid, run: RunDir, plugins: list[str], cases: list[Case] | None = None, extra: dict | None = None
) -> None:
    """A new run folder: the plan and the environment, written before any case runs.

    `cases` (a shard's) replaces the grid's in the plan; `extra` adds fields (the shard's identity).
    """
    run.path.mkdir(parents=True, exist_ok=False)
    payload = grid.plan(plugins)
    if cases is not None:
        payload["cases"] = [case.key for case in cases]
        mine = {case.case_id for case in cases}
        payload["ladders"] = [ladder.to_plan() for ladder in grid.ladders if ladder.template.case_id in mine]
    payload.update(extra or {})
    run.write_json(RunDir.PLAN, payload)
    devices = sorted({case.device for case in (cases if cases is not None else grid.cases)})
    run.write_json(RunDir.ENV, fingerprint(grid.settings, devices))


def load(run: RunDir) -> Plan:
    """plan.json as a Plan; UsageError naming the file and the field where it is damaged or foreign."""
    from suite.store.rundir import damaged

    plan, where = run.plan(), run.path / RunDir.PLAN
    unknown = sorted(set(plan) - PLAN_FIELDS)
    if unknown:
        raise damaged(where, f"unknown field(s) {', '.join(unknown)} (a newer version's plan?)")
    plugins = plan.get("plugins", [])
    if not isinstance(plugins, list) or not all(isinstance(p, str) for p in plugins):
        raise damaged(where, f"field plugins = {plugins!r} (allowed: a list of module names)")
    if not isinstance(plan.get("grid"), str):
        raise damaged(where, f"field grid = {plan.get('grid')!r} (allowed: a name)")
    settings = Settings.from_plan(plan.get("settings", {}), f"{where}: settings")  # names its own field
    try:
        ladders = [Ladder.from_plan(raw) for raw in plan.get("ladders", [])]
    except (KeyError, TypeError, ValueError, OverflowError) as err:
        raise damaged(where, f"field ladders: {err!r}") from None
    return Plan(grid=plan["grid"], cases=run.cases(), settings=settings, plugins=plugins, ladders=ladders)


def run(
    *,
    run: RunDir,
    cases: list[Case],
    settings: Settings,
    plugins: list[str],
    resume: bool,
    out=sys.stderr,
    executor: str = "local",
    address: str | None = None,
    slots: int | None = None,
    ladders: list[Ladder] = (),
) -> Counter:
    """Measure every (case, replicate) not yet in the journal; write the table; count statuses.

    `ladders` (adaptive lengths): after each round, each unsettled series gets its next length
    (suite.run.climb), in the same workers, until every ladder has stopped.
    """
    from suite.run import climb

    journal = run.journal
    previous = journal.read()
    for problem in previous.problems:
        print(f"warning: {problem}", file=out)
    journal.repair()
    # NB: a case whose worker was killed from outside (`killed`) is measured again, like a missing one
    done = {(row.case_id, row.replicate) for row in previous.rows if row.status not in UNFINISHED}
    failed = {row.case_id for row in previous.rows if row.status not in ("ok", "killed")}
    tasks = [
        (case, r)
        for case in cases
        if case.case_id not in failed
        for r in range(settings.replicates)
        if (case.case_id, r) not in done
    ]
    todo = list({case.case_id: case for case, _ in tasks}.values())
    if resume:
        print(f"resuming {run.name}: {len(cases) - len(todo)} of {len(cases)} cases already in the journal", file=out)
    began, budget_s = time.perf_counter(), settings.budget_min * 60
    outlook = foresee(tasks, ladders if not resume else (), settings, began, out)
    pool, restore = None, stop_on_signals()  # NB: for callers other than the command line too
    try:  # NB: the pool starts inside: a cluster that fails to start still leaves the table written
        pool = _pool(executor, settings, plugins, run, address, slots)
        if settings.probe:
            _probe(run, cases, pool.gemm_peak, out)
            _bandwidth(run, [*cases, *(ladder.case(ladder.high) for ladder in ladders)], pool, settings.replicates, out)
        else:
            _unprobed(run, cases, out)
        _record(pool.run(tasks, failed), journal, todo, tasks, out, outlook)
        while (
            ladders
            and (
                step := climb.next_cases(
                    run, cases, ladders, settings, journal.read().rows, out, spent_s=time.perf_counter() - began
                )
            ).cases
        ):
            cases = cases + step.cases
            tasks = step.tasks(settings.replicates)
            outlook = Outlook(began, budget_s, prices(tasks, step.cost_s, settings.replicates), step.climbs_s)
            _record(pool.run(tasks, failed), journal, step.cases, tasks, out, outlook)
            left_s = budget_s - (time.perf_counter() - began) if budget_s > 0 else float("inf")
            rest = probed(step, journal.read().rows, settings.replicates, out, left_s)
            _record(pool.run(rest, failed), journal, list({c.case_id: c for c, _ in rest}.values()), rest, out, outlook)
    finally:
        restore()
        if pool is not None:
            pool.close()
        rows = journal.read().rows
        run.write_table(table.table(cases, rows))
    wanted = {c.case_id for c in cases}
    return Counter(status for case_id, status in table.statuses(rows).items() if case_id in wanted)


def _pool(executor: str, settings: Settings, plugins: list[str], run: RunDir, address, slots):
    if executor == "ray":
        from suite.run.executors.ray_pool import RayPool

        return RayPool(settings, plugins, address, slots)
    from suite.run.executors.local import LocalPool

    return LocalPool(settings, plugins, run.log_path)


def _record(stream, journal, todo: list[Case], tasks: list[tuple[Case, int]], out, outlook: Outlook) -> None:
    """Journal each row as it comes; show progress a case at a time (a line a case in a log), with the run's
    time left (suite.run.budget: what is measured so far, not the count of cases)."""
    left = Counter(case.case_id for case, _ in tasks)
    pending = dict.fromkeys((case.case_id, r) for case, r in tasks)
    progress, finished = _progress(todo, out), 0
    try:
        for case, r, row in stream:
            journal.append(replace(row, replicate=r, finished_at=time.time()))
            pending.pop((case.case_id, r), None)
            outlook.done(case.case_id, r, row.wall_s)
            if row.status != "ok":  # NB: a failed case is not replicated further
                pending = {k: None for k in pending if k[0] != case.case_id}
            left[case.case_id] = 0 if row.status != "ok" else left[case.case_id] - 1
            if left[case.case_id] > 0:
                continue
            progress.set_postfix_str(case.label()[:70], refresh=False)
            progress.update(1)
            finished += 1
            if not progress.tty:
                eta = outlook.left(pending)
                print(f"[{finished}/{len(todo)} ~{minutes(eta)} left] {_line(case, row)}", file=out, flush=True)
    finally:
        progress.close()


def _line(case: Case, row: Row) -> str:
    result = f": {row.reason[:120]}" if row.status != "ok" else f" {row.time_s * 1e3:.3f} ms"
    return f"{row.status:<8} {case.label()}{result}"


def _probe(run: RunDir, cases: list[Case], measure_peak, out) -> None:
    """The matmul peak of each (device, dtype) of the run, once, in a worker like the cases'."""
    peaks = run.probe()
    for device, dtype in sorted({(case.device, case.dtype) for case in cases}):
        if dtype in peaks.get(device, {}):
            continue
        peaks.setdefault(device, {})[dtype] = result = measure_peak(device, dtype)
        if "flops_per_s" in result:
            print(f"matmul peak {device}/{dtype}: {result['flops_per_s'] / 1e9:.1f} GFLOP/s", file=out)
        run.write_json(RunDir.PROBE, peaks)


UNPROBED = "not asked for: the grid's settings have probe = false"


def _unprobed(run: RunDir, cases: list[Case], out) -> None:
    """Say in the probe files that this run measured no ceilings, so a reader sees why its roofline is blank."""
    pairs = sorted({(case.device, case.dtype) for case in cases})
    peaks = run.probe()
    for device, dtype in pairs:
        peaks.setdefault(device, {}).setdefault(dtype, {"error": UNPROBED})
    found = run.bandwidth()
    for device in sorted({device for device, _ in pairs} - set(found)):
        found[device] = {"error": UNPROBED}
    run.write_json(RunDir.PROBE, peaks)
    run.write_json(RunDir.BANDWIDTH, found)
    print(f"matmul peak and memory bandwidth: {UNPROBED}", file=out)


def _bandwidth(run: RunDir, cases: list[Case], pool, replicates: int, out) -> None:
    """The memory bandwidth of each device of the run, once, in a worker like the cases'; on a device whose
    entry says so, where the run has a case whose implementation is random gathers, the device's rate for
    them up to its longest such case (a ladder's: the most its range may climb to), in every worker that
    times the cases (suite.machine.gathers)."""
    from suite.machine import device as devices
    from suite.machine import gathers

    found = run.bandwidth()
    for device in sorted({case.device for case in cases} - set(found)):
        found[device] = result = pool.bandwidth(device)
        if "bytes_per_s" in result:
            print(
                f"memory bandwidth {device}: {result['bytes_per_s'] / 1e9:.1f} GB/s ± {50 * result['spread']:.1f}%"
                f" ({result['kernel']})",
                file=out,
            )
        longest = max((case.seq_len for case in cases if case.device == device and _gathers(case)), default=None)
        if devices.get(device).gathers and longest is not None:
            result["gathers"] = rate = gathers.fastest([pool.gathers(device, r, longest) for r in range(replicates)])
            if "ns_per_pair" in rate:
                ns, lengths = rate["ns_per_pair"], rate["lengths"]
                print(
                    f"random gathers {device}: {ns[0]:.1f} ns a pair at n = {lengths[0]}, {ns[-1]:.1f} at "
                    f"{lengths[-1]} (the fastest of {replicates} process(es))",
                    file=out,
                )
        run.write_json(RunDir.BANDWIDTH, found)


def _gathers(case: Case) -> bool:
    """Whether the case's implementation says its leading term is random gathers (Impl.gathers); a decode step
    gathers one row's keys."""
    import variants

    return case.mode != "decode" and bool(getattr(variants.get(case.variant).impls.get(case.impl), "gathers", False))


def _progress(todo: list[Case], out):
    from tqdm import tqdm

    tty = out.isatty()
    bar = tqdm(total=len(todo), file=out, disable=not tty, unit="case", dynamic_ncols=True)
    bar.tty = tty
    return bar
