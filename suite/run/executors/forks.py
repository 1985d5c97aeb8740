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


def context(allocator: str = "retain"):
    """Workers forked from the server. NB: a spawned worker spent its start importing the preload (2.4 s
    of CPU here, 7 s for the five workers of a 5-replicate run on 2 cores); a fork starts in 0.1 s.
    Where there is no fork server, and for workers on jemalloc (preloaded as their process starts, which
    a fork of the server cannot be: suite.machine.allocator): spawn."""
    if allocator == "jemalloc" or "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    return ctx


def start_early() -> None:
    """Start the server now, so that its imports (3.5 s here) run beside the caller's rather than after
    them. It inherits this process's environment as it is now; it exits with this process."""
    if context().get_start_method() == "forkserver":
        multiprocessing.forkserver.ensure_running()
