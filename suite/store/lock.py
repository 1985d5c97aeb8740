"""One process measures a run at a time: an advisory lock on the run folder, naming its holder.

Two `--resume` of one run at once both measured every case; now the second exits 2 naming the
process that holds the run. The kernel drops the lock when its holder dies, however it dies.
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
    """Hold the folder's lock for the block; UsageError naming the holder when another process has it."""
    path = Path(folder) / NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 512, 0).decode(errors="replace").strip() or "another process"
            raise UsageError(f"{folder} is being measured by {holder}: one process measures a run at a "
                             "time (wait for it, or stop it)") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()} since "
                      f"{time.strftime('%Y-%m-%d %H:%M:%S')}\n".encode(), 0)
        yield
    finally:
        os.close(fd)


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
            return os.pread(fd, 512, 0).decode(errors="replace").strip() or "another process"
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)
