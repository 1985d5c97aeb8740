"""Run cases as Ray actor calls: one actor per CPU slot (`threads` CPUs) or per GPU (`num_gpus=1`).

Ray schedules, the runner keeps the books: every finished (case, replicate) is appended to the
driver's journal the moment it comes back, so a lost worker or a killed driver loses nothing that
finished, and `--resume` works as with the local executor. An actor is a long-lived process like a
local worker (it measures with the same `suite.run.measurement.measure.measure`); one that dies or overruns the
case budget becomes a row with its status and is replaced. Replicates of a case go to distinct
actors where there are enough, and only after replicate 0 came back ok (a failing case is not
replicated); replicates that had to share an actor are aggregated as one process (store.row).
"""

from __future__ import annotations

import os
import time
import warnings
from collections import deque

from suite.machine import device as devices
from suite.plan.case import Case
from suite.plan.settings import Settings
from suite.run import executors
from suite.store.row import Row

INSTALL = "the Ray executor needs Ray: pip install -e '.[ray]' (or pip install 'ray[default]')"


def ray_module():
    """Ray, imported; without it an ImportError that says how to install it."""
    try:
        import ray
    except ImportError as err:
        raise ImportError(INSTALL) from err
    return ray


def make_actor_class(ray, device: str, settings: Settings):
    resources = devices.get(device).ray_resources(settings.threads)

    @ray.remote(max_restarts=0, **resources)
    class CaseActor:
        """A measuring process: the same code path as a local worker (suite.run.executors.worker), under Ray."""

        def __init__(self, settings: Settings, plugins: list[str]):
            from suite.run.executors import worker

            worker.setup(settings, plugins, device)
            self.settings = settings

        def measure(self, case: Case, replicate: int) -> Row:
            from suite.run.executors.worker import measure_case

            return measure_case(case, replicate, self.settings)

        def gemm_peak(self, dtype: str) -> dict:
            from suite.run.measurement.measure import gemm_peak

            return gemm_peak(device, dtype, self.settings.threads, self.settings.min_run_time_s)

        def bandwidth(self) -> dict:
            from suite.run.measurement.measure import bandwidth

            return bandwidth(
                device, self.settings.threads, self.settings.min_run_time_s, self.settings.memory_budget_gib
            )

        def gathers(self, longest: int) -> dict:
            from suite.run.measurement.measure import gather_rate

            return gather_rate(device, self.settings.threads, longest)

    return CaseActor


class RayPool:
    """Actors per device; dispatches (case, replicate) tasks and yields rows as they finish."""

    def __init__(self, settings: Settings, plugins: list[str], address: str | None, slots: int | None):
        ray = self.ray = ray_module()
        if not ray.is_initialized():
            # NB: a local cluster of `slots` CPU slots; an address joins an existing cluster instead
            cpus = (slots * settings.threads) if slots else max(1, os.cpu_count() or 1)
            kwargs = {"address": address} if address else {"num_cpus": cpus, "include_dashboard": False}
            ray.init(**kwargs, log_to_driver=False, configure_logging=False)
        # NB: Ray starts its actors' processes itself: auto is retain there (suite.machine.allocator)
        self.settings = executors.resolved(settings, "ray")
        self.plugins = plugins
        self.slots = slots
        self.actors: dict[str, list] = {}
        self.classes: dict[str, object] = {}

    def _class(self, device: str):
        if device not in self.classes:
            self.classes[device] = make_actor_class(self.ray, device, self.settings)
        return self.classes[device]

    def _size(self, device: str) -> int:
        total = self.ray.cluster_resources()
        wants = devices.get(device).ray_resources(self.settings.threads)
        if "num_gpus" in wants:  # one actor per accelerator
            return max(1, int(total.get("GPU", 0) // wants["num_gpus"]))
        return max(1, self.slots or int(total.get("CPU", 1) // wants["num_cpus"]))

    def actors_for(self, device: str) -> list:
        if device not in self.actors:
            cls = self._class(device)
            size = self._size(device)
            if size < self.settings.replicates:
                warnings.warn(
                    f"{size} Ray actor(s) on {device} for {self.settings.replicates} replicates: some "
                    "replicates share a process and count as one (the local executor gives each its own)",
                    stacklevel=2,
                )
            self.actors[device] = [cls.remote(self.settings, self.plugins) for _ in range(size)]
        return self.actors[device]

    def replace(self, device: str, index: int) -> None:
        self.ray.kill(self.actors[device][index], no_restart=True)
        self.actors[device][index] = self._class(device).remote(self.settings, self.plugins)

    def gemm_peak(self, device: str, dtype: str) -> dict:
        try:
            return self.ray.get(
                self.actors_for(device)[0].gemm_peak.remote(dtype), timeout=self.settings.case_timeout_s
            )
        except Exception as err:  # noqa: BLE001
            return {"error": f"the matmul probe failed under Ray: {type(err).__name__}: {err}"[:300]}

    def bandwidth(self, device: str) -> dict:
        """The bandwidth probe in actor 0, replaced after it, as the local executor closes its worker: the address
        space the probe's buffers took stays with the process."""
        try:
            return self.ray.get(self.actors_for(device)[0].bandwidth.remote(), timeout=self.settings.case_timeout_s)
        except Exception as err:  # noqa: BLE001
            return {"error": f"the bandwidth probe failed under Ray: {type(err).__name__}: {err}"[:300]}
        finally:
            if self.actors.get(device):
                self.replace(device, 0)

    def gathers(self, device: str, replicate: int, longest: int) -> dict:
        try:
            actors = self.actors_for(device)
            return self.ray.get(
                actors[replicate % len(actors)].gathers.remote(longest), timeout=self.settings.case_timeout_s
            )
        except Exception as err:  # noqa: BLE001
            return {"error": f"the gather probe failed under Ray: {type(err).__name__}: {err}"[:300]}

    def close(self) -> None:
        self.ray.shutdown()

    def run(self, tasks: list[tuple[Case, int]], failed: set):
        """Yield (case, replicate, row) as each finishes. Replicate r > 0 of a case waits for r = 0."""
        ray = self.ray
        waiting = deque(tasks)
        held: dict[str, list[tuple[Case, int]]] = {}  # case_id -> replicates waiting for replicate 0
        first = {case.case_id for case, r in tasks if r == 0}
        for case, r in list(waiting):
            if r > 0 and case.case_id in first:
                waiting.remove((case, r))
                held.setdefault(case.case_id, []).append((case, r))
        used: dict[str, set[int]] = {}
        busy: dict = {}  # ObjectRef -> (case, r, device, actor index, started)
        while waiting or busy:
            for device in {case.device for case, _ in waiting}:
                actors = self.actors_for(device)
                free = [i for i in range(len(actors)) if all(b[3] != i or b[2] != device for b in busy.values())]
                for index in free:
                    pick = next(
                        (t for t in waiting if t[0].device == device and index not in used.get(t[0].case_id, set())),
                        None,
                    )
                    if pick is None:
                        pick = next((t for t in waiting if t[0].device == device), None)
                    if pick is None:
                        break
                    waiting.remove(pick)
                    case, r = pick
                    used.setdefault(case.case_id, set()).add(index)
                    ref = actors[index].measure.remote(case, r)
                    busy[ref] = (case, r, device, index, time.perf_counter())
            if not busy:
                continue
            ready, _ = ray.wait(list(busy), num_returns=1, timeout=1.0)
            now = time.perf_counter()
            finished = [(ref, None) for ref in ready]
            finished += [
                (ref, "timeout")
                for ref, b in busy.items()
                if ref not in ready and now - b[4] > self.settings.case_timeout_s
            ]
            for ref, why in finished:
                case, r, device, index, _ = busy.pop(ref)
                if why == "timeout":
                    self.replace(device, index)
                    row = Row.lost(
                        case,
                        "timeout",
                        f"no result within the case budget of {self.settings.case_timeout_s:g}s; Ray actor killed",
                    )
                else:
                    try:
                        row = ray.get(ref)
                    except Exception as err:  # noqa: BLE001 - the actor died: the case is a row
                        self.replace(device, index)
                        row = Row.lost(case, *_death(err))
                later = held.pop(case.case_id, []) if r == 0 or row.status != "ok" else []
                if row.status != "ok":
                    failed.add(case.case_id)  # a failing case is not replicated
                else:
                    waiting.extend(later)
                yield case, r, row


def _death(err: BaseException) -> tuple[str, str]:
    text = f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}"[:400]
    # NB: Ray's message for any dead actor lists OOM among the possible causes: only its memory
    # monitor's own error (OutOfMemoryError, "running low on memory") says that it was memory
    if type(err).__name__ == "OutOfMemoryError" or "running low on memory" in str(err).lower():
        return "oom", f"Ray worker killed for memory: {text}"
    return "error", f"Ray worker died while running the case: {text}"
