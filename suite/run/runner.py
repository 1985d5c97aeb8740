"""Run a grid: cases go to worker processes, each finished case to the journal, then the table.

Isolation: a case that raises becomes a row in the worker; one that kills its worker (exit, crash,
the kernel's OOM killer) or overruns its time budget becomes a row here, and a fresh worker takes
the next case. Nothing already measured is lost: the journal is appended and fsynced per case,
and `--resume` runs only the cases it does not hold.
"""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import signal
import sys
import time
from collections import Counter
from pathlib import Path

from suite.store import table as results
from suite.plan.case import Case
from suite.run.env import fingerprint
from suite.plan.grid import Grid
from suite.store.journal import Journal

WORKER_START_TIMEOUT_S = 300.0


class WorkerError(RuntimeError):
    """A worker that could not start: not any one case's fault, so the run stops with the reason."""


class Worker:
    """One worker process for one device, restarted after any case that takes it down."""

    def __init__(self, device: str, settings: dict, plugins: list[str], log_path: Path | None = None):
        from suite.run import worker

        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(target=worker.main, daemon=True,
                                   args=(child, settings, plugins, device, str(log_path) if log_path else None))
        self.process.start()
        child.close()
        if not self.conn.poll(WORKER_START_TIMEOUT_S):
            self.kill()
            raise WorkerError(f"a {device} worker did not start within {WORKER_START_TIMEOUT_S:.0f}s")
        try:
            self.conn.recv()
        except EOFError:
            self.process.join(5)
            raise WorkerError(f"a {device} worker died while starting (exit code {self.process.exitcode}); "
                              "run with the same --plugin modules in a Python shell to see why") from None

    def run(self, case: Case, timeout_s: float, replicate: int = 0) -> dict:
        self.conn.send((case.key, replicate))
        if self.conn.poll(timeout_s):
            try:
                _, row = self.conn.recv()
                return row
            except EOFError:
                pass
        else:
            self.kill()
            return lost_row(case, "timeout", f"no result within the case budget of {timeout_s:g}s; worker killed")
        self.process.join(5)
        return lost_row(case, *_death(self.process.exitcode))

    def gemm_peak(self, dtype: str, timeout_s: float) -> dict:
        self.conn.send(("gemm_peak", dtype))
        if self.conn.poll(timeout_s):
            try:
                return self.conn.recv()[1]
            except EOFError:
                pass
        self.kill()
        return {"error": f"the matmul probe did not finish within {timeout_s:g}s or killed its worker"}

    def alive(self) -> bool:
        return self.process.is_alive()

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(5)

    def close(self) -> None:
        if self.process.is_alive():
            try:
                self.conn.send(None)
            except (BrokenPipeError, OSError):
                pass
            self.process.join(10)
        self.kill()


def _death(exitcode: int | None) -> tuple[str, str]:
    if exitcode is not None and exitcode < 0:
        name = signal.Signals(-exitcode).name
        if -exitcode == signal.SIGKILL:
            return "oom", f"worker killed by {name} (the kernel's out-of-memory killer sends it)"
        return "error", f"worker crashed with {name}"
    return "error", f"worker exited with code {exitcode} while running the case"


def lost_row(case: Case, status: str, reason: str) -> dict:
    """The row of a case whose process died or overran: its key, a status and why."""
    return {"case_id": case.case_id, **case.key, "status": status, "reason": reason}


def _replicate(row: dict) -> int:
    return int(row.get("replicate", 0))


def plan_payload(grid: Grid, plugins: list[str]) -> dict:
    from suite.plan.shard import grid_id

    return {
        "grid": grid.name, "source": grid.source, "description": grid.description,
        "settings": dataclasses.asdict(grid.settings), "plugins": plugins,
        "grid_id": grid_id(list(grid.cases)), "grid_cases": len(grid.cases),
        "cases": [case.key for case in grid.cases],
    }


def run(*, run_dir: Path, cases: list[Case], settings: dict, plugins: list[str], resume: bool,
        out=sys.stderr, executor: str = "local", address: str | None = None, slots: int | None = None) -> Counter:
    """Measure every (case, replicate) not yet in the journal; write the table; count statuses.

    Replicates are process-level: locally, replicate r of every case runs in worker process r, case
    by case (interleaved), so a comparison sees the spread between processes, not only within one.
    `executor="ray"` runs them as Ray actor calls instead (suite.ray_executor); the books are the same.
    """
    journal = Journal(run_dir / "journal.jsonl")
    previous = journal.read()
    for problem in previous.problems:
        print(f"warning: {problem}", file=out)
    journal.repair()
    replicates = int(settings.get("replicates", 1))
    done = {(row["case_id"], _replicate(row)) for row in previous.rows}
    failed = {row["case_id"] for row in previous.rows if row["status"] != "ok"}
    todo = [case for case in cases if any((case.case_id, r) not in done for r in range(replicates))]
    if resume:
        print(f"resuming {run_dir.name}: {len(cases) - len(todo)} of {len(cases)} cases already in the journal",
              file=out)
    left = {case.case_id: 0 if case.case_id in failed else
            sum((case.case_id, r) not in done for r in range(replicates)) for case in todo}
    workers: dict[tuple[str, int], Worker] = {}
    pool = None
    progress = None
    finished, began = 0, time.perf_counter()
    try:
        if executor == "ray":
            from suite.run.ray_pool import RayPool

            pool = RayPool(settings, plugins, address, slots)
            _probe(run_dir, cases, pool.gemm_peak, out)
            tasks = [(case, r) for case in todo if case.case_id not in failed
                     for r in range(replicates) if (case.case_id, r) not in done]
            stream = pool.run(tasks, failed)
        else:
            _probe(run_dir, cases, lambda device, dtype: _local_peak(device, dtype, settings, plugins, workers,
                                                                     run_dir), out)
            stream = _local(todo, replicates, done, failed, settings, plugins, workers, run_dir)
        progress = _progress(todo, out)
        for case in todo:  # failed in an earlier, resumed run: nothing left to do
            if left[case.case_id] == 0:
                progress.update(1)
                finished += 1
        for case, r, row in stream:
            row["replicate"], row["finished_at"] = r, time.time()
            journal.append(row)
            left[case.case_id] = 0 if row["status"] != "ok" else left[case.case_id] - 1
            if left[case.case_id] > 0:
                continue
            progress.set_postfix_str(case.label()[:70], refresh=False)
            progress.update(1)
            finished += 1
            if not progress.tty:  # a log, not a terminal: one line a case, with the time left
                eta = (time.perf_counter() - began) / finished * (len(todo) - finished)
                print(f"[{finished}/{len(todo)} ~{eta / 60:.0f} min left] {row['status']:<8} {case.label()}"
                      + (f": {row['reason'][:120]}" if row["status"] != "ok" else f" {row['time_s'] * 1e3:.3f} ms"),
                      file=out, flush=True)
    finally:
        if progress is not None:
            progress.close()
        for worker in workers.values():
            worker.close()
        if pool is not None:
            pool.ray.shutdown()
        rows = journal.read().rows
        results.write(results.table(cases, rows), run_dir)
    wanted = {c.case_id for c in cases}
    return Counter(status for case_id, status in results.statuses(rows).items() if case_id in wanted)


def _local(todo, replicates, done, failed, settings, plugins, workers, run_dir):
    """(case, replicate, row) from local worker processes: worker r runs replicate r, case by case."""
    for case in todo:
        for r in range(replicates):
            if (case.case_id, r) in done:
                continue
            if case.case_id in failed:
                break  # a case that failed is not replicated
            worker = workers.get((case.device, r))
            if worker is None or not worker.alive():
                workers[(case.device, r)] = worker = Worker(case.device, settings, plugins, run_dir / "worker.log")
            row = worker.run(case, settings["case_timeout_s"], r)
            if row["status"] != "ok":
                failed.add(case.case_id)
            yield case, r, row


def _local_peak(device, dtype, settings, plugins, workers, run_dir) -> dict:
    worker = workers.get((device, 0))
    if worker is None or not worker.alive():
        workers[(device, 0)] = worker = Worker(device, settings, plugins, run_dir / "worker.log")
    return worker.gemm_peak(dtype, settings["case_timeout_s"])


def _probe(run_dir: Path, cases: list[Case], measure_peak, out) -> None:
    """The matmul peak of each (device, dtype) of the run, once, in a worker like the cases'."""
    path = run_dir / "probe.json"
    peaks = results.read_json(run_dir, "probe.json")
    for device, dtype in sorted({(case.device, case.dtype) for case in cases}):
        if dtype in peaks.get(device, {}):
            continue
        peaks.setdefault(device, {})[dtype] = result = measure_peak(device, dtype)
        if "flops_per_s" in result:
            print(f"matmul peak {device}/{dtype}: {result['flops_per_s'] / 1e9:.1f} GFLOP/s", file=out)
        path.write_text(json.dumps(peaks, indent=1))


def _progress(todo: list[Case], out):
    from tqdm import tqdm

    tty = out.isatty()
    bar = tqdm(total=len(todo), file=out, disable=not tty, unit="case", dynamic_ncols=True)
    bar.tty = tty
    return bar


def start(grid: Grid, run_dir: Path, plugins: list[str], cases: list[Case] | None = None,
          extra: dict | None = None) -> None:
    """A new run folder: the plan and the environment, written before any case runs.

    `cases` (a shard's) replaces the grid's in the plan; `extra` adds fields (the shard's identity).
    """
    run_dir.mkdir(parents=True, exist_ok=False)
    payload = plan_payload(grid, plugins)
    if cases is not None:
        payload["cases"] = [case.key for case in cases]
    payload.update(extra or {})
    (run_dir / "plan.json").write_text(json.dumps(payload, indent=1))
    devices = sorted({case.device for case in (cases if cases is not None else grid.cases)})
    env = fingerprint(dataclasses.asdict(grid.settings), devices)
    (run_dir / "env.json").write_text(json.dumps(env, indent=1))


def load_plan(run_dir: Path) -> dict:
    path = run_dir / "plan.json"
    if not path.is_file():
        raise FileNotFoundError(f"--resume {run_dir.name}: no {path} (was the run started here?)")
    return json.loads(path.read_text())
