"""Measuring processes die with the process that drives them.

A local worker is forked from the fork server, not from the runner, and holds the server open; one
left hanging in a case after a `kill -9` of the runner spun a core for minutes, skewing whatever was
timed next. Here a worker watches its pipe to the runner and exits the moment the runner's end is
closed (the kernel closes it when the runner dies, however it dies); `suite ab`'s workers, children
of the driver itself, get the kernel's parent-death signal instead.
"""

from __future__ import annotations

import ctypes
import os
import select
import signal
import sys
import threading

PR_SET_PDEATHSIG = 1
# NB: looked up here, in the parent: a child between fork and exec should call, not load a library
_PRCTL = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None


def exit_with(conn) -> None:
    """End this process when the other end of `conn` (a multiprocessing Connection over a socket pair)
    is closed, even while the main thread is busy in a case. A thread blocked in poll(): no wake-ups."""
    if not hasattr(select, "POLLRDHUP"):  # NB: not Linux: the peer's close cannot be awaited this way
        return
    fd = conn.fileno()
    gone = select.POLLRDHUP | select.POLLHUP | select.POLLERR | select.POLLNVAL

    def watch() -> None:
        poller = select.poll()
        poller.register(fd, select.POLLRDHUP)
        while True:
            if any(event & gone for _, event in poller.poll()):
                os._exit(1)

    threading.Thread(target=watch, name="suite-exit-with-runner", daemon=True).start()


def die_with_parent() -> None:
    """For subprocess.Popen(preexec_fn=...): the kernel kills this child when its parent exits (Linux)."""
    if _PRCTL is not None:
        _PRCTL(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
