"""Signals a command ends on as it ends on Ctrl-C: SIGTERM (`timeout`, a cancelled CI job) and SIGHUP
(a closed terminal) raise KeyboardInterrupt, so every `finally` runs (tables written, `ab`'s worktrees
removed) and the command line prints one line instead of a traceback."""

from __future__ import annotations

import signal
import threading


def stop_on_signals():
    """SIGTERM and SIGHUP (a CI job cancelled, a closed terminal) stop a command as Ctrl-C does: its
    `finally` blocks run (tables written, `ab`'s worktrees removed). Returns the call that restores the
    previous handlers."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def stop(signum, frame):
        raise KeyboardInterrupt(signal.Signals(signum).name)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGHUP)}
    return lambda: [signal.signal(sig, handler) for sig, handler in previous.items()]
