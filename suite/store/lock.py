"""One process measures a run at a time, and no command reads a run while it is measured: an advisory
lock on the run folder (its `.lock`), naming its holder.

The process measuring a run holds the lock exclusively (`held`): a second `--resume` of the run exits 2
naming it. A command that reads a run (report, compare, baseline save, merge, export, card, history
add) holds it shared (`reading`): it exits 2 naming the process measuring the run, and a `--resume`
started while it reads exits 2 too. The kernel drops the lock when its holder dies, however it dies.
"""

from __future__ import annotations

import fcntl
import os
import socket
import time
from contextlib import contextmanager
from pathlib import Path

from suite.errors import UsageError

NAME = ".lock"


@contextmanager
def held(folder: Path):
    """Hold the folder's lock exclusively for the block (the process measuring the run); UsageError naming the
    process measuring it, or saying that commands read it."""
    path = Path(folder) / NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise _busy(fd, folder) from None
        os.ftruncate(fd, 0)
        os.pwrite(
            fd, f"pid {os.getpid()} on {socket.gethostname()} since {time.strftime('%Y-%m-%d %H:%M:%S')}\n".encode(), 0
        )
        yield
    finally:
        os.close(fd)


def _busy(fd: int, folder: Path) -> UsageError:
    """Why the lock on `fd` cannot be held exclusively: the process measuring the run, or commands reading it."""
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return UsageError(
            f"{folder} is being measured by {_text(fd)}: one process measures a run at a time (wait for it, or stop it)"
        )
    fcntl.flock(fd, fcntl.LOCK_UN)
    return UsageError(
        f"{folder} is being read by another command (report, compare, baseline save, merge, export, "
        "card or history add): a run is not measured while it is read (run it again when that has "
        "finished)"
    )


@contextmanager
def reading(folder: Path, command: str):
    """Hold the folder's lock shared for the block, so that no process measures the run while `command`
    reads it; UsageError naming the process measuring it now. Reads only: a folder without a lock file
    was never measured by a process that took one, and none is made (a results folder may be read-only)."""
    path = Path(folder) / NAME
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        fd = None
    except OSError as err:
        raise UsageError(
            f"{command} {folder}: its lock {path} cannot be read ({err.strerror or err}; allowed: the "
            "plain file a run's measuring process makes)"
        ) from None
    try:
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                raise UsageError(
                    f"{command} {folder}: the run is being measured by {_text(fd)} (allowed: a run "
                    "nobody is measuring: wait for it to finish, or stop it)"
                ) from None
        yield
    finally:
        if fd is not None:
            os.close(fd)


def _text(fd: int) -> str:
    return os.pread(fd, 512, 0).decode(errors="replace").strip() or "another process"


def holder(folder: Path) -> str | None:
    """Who is measuring the run in `folder` now (its lock's text), or None where nobody is. Reads only:
    the lock file is not made, and not written."""
    path = Path(folder) / NAME
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return _text(fd)
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)
