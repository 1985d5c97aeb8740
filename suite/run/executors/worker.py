"""A worker process: measures the cases it is sent, one at a time, and answers with rows.

Cases run here, not in the runner, so that a crash, a hang or memory exhaustion in one case costs
at most this process: the runner records the case with its status and starts a fresh worker.
On CPU an address-space limit (RLIMIT_AS: the grid's memory budget above what the worker holds
once started) turns memory exhaustion into a clean RuntimeError instead of the kernel's SIGKILL.
"""

from __future__ import annotations

import importlib
import os
from typing import TYPE_CHECKING

from suite.machine.address_space import limit_address_space

if TYPE_CHECKING:  # NB: a local worker is forked with torch imported (suite.run.executors.forks)
    from suite.plan.case import Case
    from suite.plan.settings import Settings
    from suite.store.row import Row


def setup(settings: Settings, plugins: list[str], device: str) -> None:
    """Make this process a measuring one: budget, allocator, threads, variants. Local or Ray alike."""
    from suite.machine import device as devices

    if devices.get(device).limit_address_space:  # NB: never where CUDA is initialized
        # NB: inductor compiles in worker subprocesses by default; compiling in-process keeps the
        # address-space limit meaningful and leaves no background processes beside CPU timing.
        os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
        limit_address_space(settings.memory_budget_gib)
    from suite.machine import allocator

    allocator.configure(settings.allocator)
    import torch

    torch.set_num_threads(settings.threads)
    # float32 means float32: cuDNN (LSTM, conv) would otherwise round to TF32 (its LSTM then misses the float64
    # reference by more than float32's tolerance); matmul is IEEE by default
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    import variants  # noqa: F401  registers the built-in variants

    for module in plugins:
        importlib.import_module(module)


def measure_case(case: Case, replicate: int, settings: Settings) -> Row:
    """One case's row, then the heap handed back: retained within a case, released between cases."""
    from suite.machine import allocator
    from suite.run.measurement.measure import measure

    row = measure(case, settings, replicate=replicate)
    allocator.trim()
    return row


def main(conn, settings: Settings, plugins: list[str], device: str, log_path: str | None = None) -> None:
    from suite.run.executors.orphan import exit_with

    exit_with(conn)  # NB: first: a worker must not outlive its runner, even one stuck in a case
    if log_path:  # compiler output, library warnings, the profiler's lines: kept, but off the terminal
        fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
    setup(settings, plugins, device)
    from suite.run.measurement.measure import bandwidth, gather_rate, gemm_peak

    conn.send(("ready", os.getpid()))
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        if message is None:
            return
        if message[0] == "gemm_peak":  # the device's matmul rate, for the report's efficiency
            conn.send(("peak", gemm_peak(device, message[1], settings.threads, settings.min_run_time_s)))
            continue
        if message[0] == "bandwidth":  # the device's memory bandwidth, the roofline's other ceiling
            try:
                conn.send(
                    (
                        "bandwidth",
                        bandwidth(device, settings.threads, settings.min_run_time_s, settings.memory_budget_gib),
                    )
                )
            except Exception as err:  # noqa: BLE001 — the run goes on without it (its report says so)
                conn.send(("bandwidth", {"error": f"{type(err).__name__}: {err}"[:300]}))
            continue
        if message[0] == "gathers":  # this process's rate for random gathers, for the cost model
            try:
                conn.send(("gathers", gather_rate(device, settings.threads, message[1])))
            except Exception as err:  # noqa: BLE001 — the run goes on without it (its verdicts say so)
                conn.send(("gathers", {"error": f"{type(err).__name__}: {err}"[:300]}))
            continue
        case, replicate = message
        conn.send(("row", measure_case(case, replicate, settings)))
