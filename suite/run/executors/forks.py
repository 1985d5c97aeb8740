"""The fork server that local workers are forked from (suite.run.executors.local), and starting it early.

Imports nothing heavy itself, so that `python -m suite run` can start the server before its own
imports: the two import torch side by side (suite/__main__.py).
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.forkserver

# Imported once, by the fork server, before any worker is forked. The server runs no torch operation, so
# no thread pool is copied into a fork. NB: not torch._dynamo, which replicate 0's FLOP count imports
# (2-3 s): preloaded into every worker, A/A false alarms over 10 processes (test_compare's) rose from
# 16 to 51 in 19500 comparisons, five runs alternating on the AMD host (2026-11-26).
PRELOAD = ["torch", "variants"]


_SERVER: dict[str, str] = {}  # "allocator": what the fork server was started on (suite.machine.allocator)


def context(allocator: str = "auto"):
    """Workers forked from the server, which runs on the allocator it was started with (jemalloc
    preloaded, or glibc): a worker of another allocator is spawned. NB: a spawned worker spent its start
    importing the preload (2.4 s of CPU here, 7 s for the five workers of a 5-replicate run on 2 cores);
    a fork starts in 0.1 s. Where there is no fork server: spawn."""
    from suite.machine import allocator as allocators

    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    mode = allocators.resolve(allocator)
    server = _SERVER.setdefault("allocator", mode)
    if mode != server:
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    with allocators.started_with(server):  # NB: a server that died is started again the same way
        multiprocessing.forkserver.ensure_running()
    return ctx


def start_early() -> None:
    """Start the server now, on the default allocator, so that its imports (3.5 s here) run beside the
    caller's rather than after them. It exits with this process."""
    context()
