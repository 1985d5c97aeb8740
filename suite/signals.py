"""Signals a command ends on as it ends on Ctrl-C: SIGTERM (`timeout`, a cancelled CI job) and SIGHUP
(a closed terminal) raise KeyboardInterrupt, so every `finally` runs (tables written, `ab`'s worktrees
removed) and the command line prints one line instead of a traceback.

A handler's exception lands in whatever Python code runs next, and where that is a finaliser or a fork
hook the interpreter swallows it ("Exception ignored in ...") and goes on: the command would run past
its stop. So a stop swallowed that way is sent again to the main thread, a moment later, from a thread of
its own (sent from the hook, it would land in the hook); one swallowed again is sent again.
"""

from __future__ import annotations

import _thread
import signal
import sys
import threading
import time

STOPS = (signal.SIGTERM, signal.SIGHUP)


def stop_on_signals():
    """SIGTERM and SIGHUP (a CI job cancelled, a closed terminal) stop a command as Ctrl-C does: its
    `finally` blocks run (tables written, `ab`'s worktrees removed); one the command was started
    ignoring (`nohup`) stays ignored. Returns the call that restores the previous handlers."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def stop(signum, frame):
        raise KeyboardInterrupt(signal.Signals(signum).name)

    # NB: a signal ignored when the command started (nohup's SIGHUP) stays ignored
    previous = {sig: signal.signal(sig, stop) for sig in STOPS if signal.getsignal(sig) is not signal.SIG_IGN}
    hook = sys.unraisablehook
    sys.unraisablehook = _again(hook)

    def restore() -> None:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        sys.unraisablehook = hook

    return restore


def _again(hook):
    """An unraisable-exception hook that sends a swallowed stop again instead of printing it."""
    names = {sig.name: sig for sig in STOPS}

    def unraisable(info) -> None:
        if not isinstance(info.exc_value, KeyboardInterrupt):
            return hook(info)
        signum = names.get(str(info.exc_value), signal.SIGINT)
        try:  # NB: a bare thread: threading.Thread.start waits for its thread, and the stop would land in that wait
            _thread.start_new_thread(_send, (threading.main_thread().ident, signum))
        except RuntimeError:  # the interpreter is shutting down: it stops anyway
            pass

    return unraisable


def _send(thread: int, signum: int) -> None:
    time.sleep(0.01)
    try:
        signal.pthread_kill(thread, signum)
    except OSError:  # the main thread has ended
        pass
