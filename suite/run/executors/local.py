"""Local worker processes: one per (device, replicate), restarted after any case that takes it down.

Replicate r of every case runs in worker process r, case by case (interleaved), so a comparison
sees the spread between processes, not only within one.
"""

from __future__ import annotations

import signal
from pathlib import Path

from suite.plan.case import Case
from suite.plan.settings import Settings
from suite.run.executors import forks
from suite.store.row import Row

WORKER_START_TIMEOUT_S = 300.0


class WorkerError(RuntimeError):
    """A worker that could not start: not any one case's fault, so the run stops with the reason."""


class Worker:
    """One worker process for one device, restarted after any case that takes it down."""

    def __init__(
        self, device: str, settings: Settings, plugins: list[str], log_path: Path | None = None, wait: bool = True
    ):
        from suite.machine import allocator
        from suite.run import executors
        from suite.run.executors import worker

        settings = executors.resolved(settings, "local")  # auto: which
        ctx = forks.context(settings.allocator)
        self.device = device
        self.conn, child = ctx.Pipe()
        self.process = ctx.Process(
            target=worker.main,
            daemon=True,
            args=(child, settings, plugins, device, str(log_path) if log_path else None),
        )
        with allocator.started_with(settings.allocator):
            self.process.start()
        child.close()
        self.started = False
        if wait:
            self.ready()

    def ready(self) -> "Worker":
        """Wait for the worker's hello (it has set its limits and imported torch and the variants)."""
        if self.started:
            return self
        device = self.device
        if not self.conn.poll(WORKER_START_TIMEOUT_S):
            self.kill()
            raise WorkerError(f"a {device} worker did not start within {WORKER_START_TIMEOUT_S:.0f}s")
        try:
            self.conn.recv()
        except EOFError:
            self.process.join(5)
            raise WorkerError(
                f"a {device} worker died while starting (exit code {self.process.exitcode}); "
                "run with the same --plugin modules in a Python shell to see why"
            ) from None
        self.started = True
        return self

    def run(self, case: Case, timeout_s: float, replicate: int = 0) -> Row:
        before = oom_kills()
        self.conn.send((case, replicate))
        if self.conn.poll(timeout_s):
            try:
                _, row = self.conn.recv()
                return row
            except EOFError:
                pass
        else:
            self.kill()
            return Row.lost(case, "timeout", f"no result within the case budget of {timeout_s:g}s; worker killed")
        self.process.join(5)
        return Row.lost(case, *_death(self.process.exitcode, before, oom_kills()))

    def gemm_peak(self, dtype: str, timeout_s: float) -> dict:
        return self._probe(("gemm_peak", dtype), "the matmul probe", timeout_s)

    def bandwidth(self, timeout_s: float) -> dict:
        return self._probe(("bandwidth",), "the bandwidth probe", timeout_s)

    def gathers(self, longest: int, timeout_s: float) -> dict:
        return self._probe(("gathers", longest), "the gather probe", timeout_s)

    def _probe(self, message: tuple, what: str, timeout_s: float) -> dict:
        self.conn.send(message)
        if self.conn.poll(timeout_s):
            try:
                return self.conn.recv()[1]
            except EOFError:
                pass
        self.kill()
        return {"error": f"{what} did not finish within {timeout_s:g}s or killed its worker"}

    def alive(self) -> bool:
        return self.process.is_alive()

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(5)

    def stop(self) -> None:
        """Ask the worker to exit, without waiting (close waits)."""
        if self.process.is_alive():
            try:
                self.conn.send(None)
            except (BrokenPipeError, OSError):
                pass

    def close(self) -> None:
        self.stop()
        self.process.join(10)
        self.kill()


def _death(exitcode: int | None, oom_before: int | None = None, oom_after: int | None = None) -> tuple[str, str]:
    """(status, reason) of a worker that died in a case. SIGKILL is `oom` only where the kernel counted
    an out-of-memory kill meanwhile; otherwise something outside the suite killed it: `killed`, which
    --resume runs again."""
    if exitcode is not None and exitcode < 0:
        name = signal.Signals(-exitcode).name
        if -exitcode == signal.SIGKILL:
            if oom_before is not None and oom_after is not None and oom_after > oom_before:
                return "oom", f"worker killed by {name}: the kernel's out-of-memory killer (its count rose)"
            seen = "it counted no out-of-memory kill" if oom_before is not None else "its OOM count could not be read"
            return "killed", f"worker killed by {name} from outside the suite ({seen}); --resume runs it again"
        return "error", f"worker crashed with {name}"
    return "error", f"worker exited with code {exitcode} while running the case"


OOM_COUNTS = ("/sys/fs/cgroup/memory.events", "/proc/vmstat")  # this cgroup's, then the machine's


def oom_kills() -> int | None:
    """The kernel's out-of-memory kills so far (this cgroup's and the machine's, summed); None where
    neither can be read."""
    total, found = 0, False
    for path in OOM_COUNTS:
        try:
            with open(path) as fh:
                for line in fh:
                    name, _, value = line.partition(" ")
                    if name == "oom_kill":
                        total, found = total + int(value), True
        except (OSError, ValueError):
            continue
    return total if found else None


class LocalPool:
    """Worker processes on this machine, with the executor interface the runner uses (as RayPool)."""

    def __init__(self, settings: Settings, plugins: list[str], log_path: Path | None):
        self.settings, self.plugins, self.log_path = settings, plugins, log_path
        self.workers: dict[tuple[str, int], Worker] = {}

    def _worker(self, device: str, replicate: int) -> Worker:
        worker = self.workers.get((device, replicate))
        if worker is None or not worker.alive():
            worker = Worker(device, self.settings, self.plugins, self.log_path)
            self.workers[(device, replicate)] = worker
        return worker

    def gemm_peak(self, device: str, dtype: str) -> dict:
        return self._worker(device, 0).gemm_peak(dtype, self.settings.case_timeout_s)

    def bandwidth(self, device: str) -> dict:
        """The bandwidth probe, in a worker closed after it: the address space its buffers took (up to three
        quarters of the memory budget) stays mapped in the process (jemalloc keeps it), where a case's
        budget would no longer hold (Triton's library failed to map after 2.25 GiB of a 3 GiB budget)."""
        worker = self._worker(device, 0)
        try:
            return worker.bandwidth(self.settings.case_timeout_s)
        finally:
            worker.close()

    def gathers(self, device: str, replicate: int, longest: int) -> dict:
        """The gather probe, to n = `longest`, in the worker that times the cases' `replicate` (suite.machine.gathers)."""
        return self._worker(device, replicate).gathers(longest, self.settings.case_timeout_s)

    def start(self, slots) -> None:
        """Start the workers of these (device, replicate) slots side by side, and wait for them all.

        NB: a worker spends its start importing torch and the variants; started one by one, the workers of a
        many-replicate run take that as many times over (docs/performance.md, "Workers: spawned, forked and
        preloaded"). All are ready before any case is timed, so no case is timed beside another worker's start."""
        pending = [
            (slot, Worker(slot[0], self.settings, self.plugins, self.log_path, wait=False))
            for slot in dict.fromkeys(slots)
            if slot not in self.workers or not self.workers[slot].alive()
        ]
        try:
            for slot, worker in pending:
                self.workers[slot] = worker.ready()
        except WorkerError:
            for _, worker in pending:
                worker.kill()
            raise

    def run(self, tasks: list[tuple[Case, int]], failed: set[str]):
        """Yield (case, replicate, row) in task order; a case that failed is not replicated further."""
        self.start((case.device, r) for case, r in tasks if case.case_id not in failed)
        for case, r in tasks:
            if case.case_id in failed:
                continue
            row = self._worker(case.device, r).run(case, self.settings.case_timeout_s, r)
            if row.status != "ok":
                failed.add(case.case_id)
            yield case, r, row

    def close(self) -> None:
        """Stop every worker, then wait for each: a worker's exit is torch's teardown, which in turn would
        add up at the end of every run (docs/performance.md, "Workers: spawned, forked and preloaded")."""
        for worker in self.workers.values():
            worker.stop()
        for worker in self.workers.values():
            worker.close()
