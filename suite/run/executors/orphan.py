"""Measuring processes die with the process that drives them.

A local worker is forked from the fork server, not from the runner, and holds the server open; one
left hanging in a case after a `kill -9` of the runner spun a core for minutes, skewing whatever was
timed next. Here a worker watches its pipe to the runner and exits the moment the runner's end is
closed (the kernel closes it when the runner dies, however it dies); `suite ab`'s workers, children
of the driver itself, get the kernel's parent-death signal instead, set by the child itself (`child_argv`).

Not by Popen's preexec_fn: with one, Popen runs the interpreter's fork hooks in the parent (logging's
lock release among them), and a SIGTERM landing in one was swallowed as an "Exception ignored", so
`suite ab` ran on past it, and logging's lock stayed held.
"""

from __future__ import annotations

import os
import select
import sys
import threading

PR_SET_PDEATHSIG = 1


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


_BOOT = (
    """import os, runpy, sys
parent = int(sys.argv.pop(1))
if sys.platform.startswith("linux"):
    import ctypes, signal
    ctypes.CDLL(None, use_errno=True).prctl(%d, int(signal.SIGKILL), 0, 0, 0)
if os.getppid() != parent:  # NB: the parent died before the line above took effect
    os._exit(1)
runpy.run_module(sys.argv.pop(1), run_name="__main__", alter_sys=True)
"""
    % PR_SET_PDEATHSIG
)


def child_argv(module: str) -> list[str]:
    """The command line of `python -m module` in a child the kernel kills when this process exits
    (Linux). The module is found as `-m` finds it: from the child's working directory first."""
    return [sys.executable, "-c", _BOOT, str(os.getpid()), module]
