"""Interleaved A/B: two checkouts' cases timed alternately in one sweep, so drift between them cancels.

For each of P pairs of worker processes (one from side A's checkout, one from B's, started together
and kept for the whole pass over the cases), every case is timed in blocks in the order A, B, B, A
(R rounds of it): a drift that is linear over those four blocks adds the same to both sides. The pairs differ in
their processes, so the spread of the per-pair differences carries the between-process noise
(suite.analyse.paired tests on it). Every block is a journal line (ab.jsonl), fsynced as it lands.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

from suite.machine import allocator
from suite.plan.case import Case
from suite.plan.grid import Grid
from suite.plan.settings import Settings
from suite.run.ab.checkouts import Side
from suite.run.env import fingerprint
from suite.run.executors.orphan import child_argv
from suite.store import atomic
from suite.store.journal import append_line
from suite.store.row import Row
from suite.store.rundir import RunDir

ORDER = ("a", "b", "b", "a")  # within a pair, per case
MIN_DEFAULT_PAIRS = (
    6  # without --pairs: the grid's replicates, at least this many (docs/performance.md: the power of suite ab)
)
DEFAULT_ROUNDS = (
    2  # A, B, B, A twice per pair: the block-to-block noise dominates (docs/performance.md: the power of suite ab)
)
START_TIMEOUT_S = 300.0


def server_module(root: Path) -> str:
    """The checkout's `ab` server: suite/run/ab/server.py, or suite/run/serve.py in a checkout from before
    run/ was grouped (so `suite ab` compares across the move)."""
    return "suite.run.serve" if (Path(root) / "suite" / "run" / "serve.py").is_file() else "suite.run.ab.server"


def resolved(settings: Settings, sides: tuple[Side, ...]) -> Settings:
    """`auto` made one allocator for both sides: jemalloc where the system has it and every side's code
    knows the setting (a checkout from before it would refuse it), else retain."""
    if settings.allocator != "auto":
        return settings
    code = (Path(side.root) / "suite" / "machine" / "allocator.py" for side in sides)
    knows = all(path.is_file() and '"jemalloc"' in path.read_text() for path in code)
    return replace(settings, allocator=allocator.resolve("auto") if knows else "retain")


class ServeWorker:
    """One server process (`server_module`) in a side's checkout, restarted after a case kills it."""

    def __init__(self, side: Side, device: str, settings: Settings, plugins: list[str], log: Path, wait: bool = True):
        self.side, self.device, self.settings, self.plugins, self.log = side, device, settings, plugins, log
        self.registry: dict[str, list[str]] = {}
        self.proc: subprocess.Popen | None = None
        self.launch()
        if wait:
            self.ready()

    def start(self) -> None:
        self.launch()
        self.ready()

    def launch(self) -> None:
        """Start the process and send it the settings; `ready` waits for its answer."""
        with os.fdopen(atomic.open_plain(self.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT), "ab") as log:
            # NB: the server of any checkout dies with this driver (child_argv)
            self.proc = subprocess.Popen(
                child_argv(server_module(self.side.root)),
                cwd=self.side.root,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
                env={**os.environ, **allocator.environment(self.settings.allocator)},
            )
        hello = {"settings": self.settings.to_plan(), "plugins": self.plugins, "device": self.device}
        self._send(hello)

    def ready(self) -> "ServeWorker":
        answer = self._answer(START_TIMEOUT_S)
        if answer is None or "ready" not in answer:
            self.close()
            raise RuntimeError(
                f"side {self.side.label} ({self.side.given}): its worker did not start "
                f"(does that checkout have suite/run/ab/server.py or suite/run/serve.py? see {self.log})"
            )
        self.registry = answer["registry"]
        return self

    def has(self, case: Case) -> bool:
        return case.impl in self.registry.get(case.variant, ())

    def run(self, case: Case, replicate: int) -> Row:
        if self.proc is None or self.proc.poll() is not None:
            self.start()
        answer = self._ask({"case": case.key, "replicate": replicate}, self.settings.case_timeout_s)
        if answer is not None:
            return Row.from_json(answer["row"])
        timed_out = self.proc.poll() is None
        self.close()
        if timed_out:
            return Row.lost(case, "timeout", f"no result within the case budget of {self.settings.case_timeout_s:g}s")
        return Row.lost(case, "error", f"side {self.side.label}'s worker exited with code {self.proc.returncode}")

    def _ask(self, message: dict, timeout_s: float) -> dict | None:
        return self._answer(timeout_s) if self._send(message) else None

    def _send(self, message: dict) -> bool:
        try:
            self.proc.stdin.write(json.dumps(message) + "\n")
            self.proc.stdin.flush()
            return True
        except (BrokenPipeError, OSError):
            return False

    def _answer(self, timeout_s: float) -> dict | None:
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout_s)
        line = self.proc.stdout.readline() if ready else ""
        return json.loads(line) if line else None

    def close(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("null\n")
                self.proc.stdin.flush()
                self.proc.wait(10)
            except (BrokenPipeError, OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait(5)


def start(run: RunDir, grid: Grid, a: Side, b: Side, pairs: int, rounds: int, plugins: list[str]) -> None:
    """The sweep's folder: the grid's plan with the two sides and the design, and the environment."""
    run.path.mkdir(parents=True)
    design = {
        "pairs": pairs,
        "rounds": rounds,
        "order": "".join(ORDER),
        "sides": {s.label: {"given": s.given, "commit": s.commit} for s in (a, b)},
    }
    run.write_json(RunDir.PLAN, {**grid.plan(plugins), "ab": design})
    run.write_json(RunDir.ENV, fingerprint(grid.settings, sorted({c.device for c in grid.cases})))


def block_line(row: Row, side: str, pair: int, position: int) -> dict:
    """A journal line: the row's JSON with where it was taken."""
    return {"side": side, "pair": pair, "position": position, **row.to_json()}


def sweep(
    cases: list[Case],
    a: Side,
    b: Side,
    settings: Settings,
    plugins: list[str],
    pairs: int,
    journal: Path,
    log: Path,
    out=sys.stderr,
    rounds: int = 1,
) -> None:
    """Time every case P × R × (A, B, B, A), pair by pair; a case that fails on a side is not timed further."""
    dropped: set[str] = set()
    began = time.perf_counter()
    devices = list(dict.fromkeys(c.device for c in cases))
    for pair in range(pairs):
        workers: dict[tuple[str, str], ServeWorker] = {}  # (side, device)
        try:
            # NB: started side by side, then each waited for: a worker's start is seconds of imports,
            # and no case is timed before both sides' workers are ready
            for side in (a, b):
                for device in devices:
                    workers[side.label, device] = ServeWorker(side, device, settings, plugins, log, wait=False)
            for w in workers.values():
                w.ready()
            for case in cases:
                if case.case_id not in dropped:
                    _case(
                        case, pair, {s.label: workers[s.label, case.device] for s in (a, b)}, journal, dropped, rounds
                    )
        finally:
            for w in workers.values():
                w.close()
        left = (time.perf_counter() - began) / (pair + 1) * (pairs - pair - 1)
        print(f"pair {pair + 1}/{pairs} done, ~{left / 60:.1f} min left", file=out, flush=True)


def _case(
    case: Case, pair: int, workers: dict[str, ServeWorker], journal: Path, dropped: set[str], rounds: int = 1
) -> None:
    """One case's R × four blocks in one pair; replicate 0 (FLOPs, memory) only on pair 0's first blocks.

    After a block that is not ok, only a side with no block yet is still asked (so that both sides
    have a status: skipped on both, failed on one, absent from one), and the case is dropped.
    """
    seen: set[str] = set()
    for position, label in enumerate(ORDER * rounds):
        if case.case_id in dropped and label in seen:
            continue
        worker = workers[label]
        if not worker.has(case):
            row = Row.lost(case, "absent", f"side {label} ({worker.side.given}) has no {case.variant}/{case.impl}")
        else:
            first = pair == 0 and label not in seen
            row = worker.run(case, 0 if first else 1 + pair)
        seen.add(label)
        append_line(journal, block_line(replace(row, finished_at=time.time()), label, pair, position))
        if row.status != "ok":
            dropped.add(case.case_id)
