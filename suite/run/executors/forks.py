"""The fork server that local workers are forked from (suite.run.executors.local), and starting it early.

Imports nothing heavy itself, so that `python -m suite run` can start the server before its own
imports: the two import torch side by side (suite/__main__.py).
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.forkserver

# Imported once, by the fork server, before any worker is forked. The server runs no torch operation, so
# no thread pool is copied into a fork. NB: not torch._dynamo, which replicate 0's FLOP count imports:
# preloaded into every worker, it raised the A/A false alarms (docs/performance.md, "Workers: spawned, forked and
# preloaded").
PRELOAD = ["torch", "variants"]


_SERVER: dict[str, str] = {}  # "allocator": what the fork server was started on (suite.machine.allocator)


def context(allocator: str = "auto"):
    """Workers forked from the server, which runs on the allocator it was started with (jemalloc
    preloaded, or glibc): a worker of another allocator is spawned. NB: a spawned worker spends its start
    importing the preload, where a fork starts at once (docs/performance.md, "Workers: spawned, forked and
    preloaded"). Where there is no fork server: spawn."""
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
    """Start the server now, on the default allocator, so that its imports (torch's: seconds) run beside the
    caller's rather than after them. It exits with this process."""
    context()
