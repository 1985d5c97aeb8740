"""How the measuring process allocates CPU memory: a recorded setting, never a hidden one.

glibc serves every allocation over 128 KiB (its default mmap threshold) with fresh pages and hands
them back on free, so a kernel that makes megabyte-sized temporaries pays page faults on every call:
on this machine a third of a blocked attention's time at n = 16384, and most of a 2 MiB copy. The
`retain` setting keeps freed memory in the heap (mallopt), as jemalloc/tcmalloc do for PyTorch on
CPU, while a case runs; between cases the worker trims the heap (`trim`). It applies to every
implementation alike and is written into each run's environment.

`retain` cannot keep every freed block for reuse: PyTorch asks for 64-byte aligned memory, and glibc
(2.36, Debian 12's) serves an aligned request only from a free block larger than the one the same
tensor freed, so a call whose temporaries are tens of megabytes may take fresh pages, and fault them
in, on every call, depending on what the process allocated before (docs/performance.md (21)). The
`jemalloc` setting runs the workers on jemalloc (the system's libjemalloc.so.2, preloaded into the
process the workers are forked from) with freed pages kept for reuse (no decay) while a case runs, and
purged between cases. `auto`, the default, is jemalloc where the system has it and the workers are this
tool's local processes, else `retain`; a run records which (`resolve`).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
from pathlib import Path

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameter numbers (malloc.h)
M_MMAP_THRESHOLD = -3
MODES = ("auto", "retain", "default", "jemalloc")
JEMALLOC = "libjemalloc.so.2"
JEMALLOC_CONF = "dirty_decay_ms:-1,muzzy_decay_ms:-1"  # freed pages stay with the process until purged
PURGE_ALL = b"arena.4096.purge"  # MALLCTL_ARENAS_ALL


def jemalloc_library() -> str | None:
    """The path of the system's jemalloc (Debian/Ubuntu: the libjemalloc2 package), or None."""
    for folder in (
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib/aarch64-linux-gnu",
        "/usr/lib64",
        "/usr/lib",
        "/usr/local/lib",
    ):
        if (Path(folder) / JEMALLOC).is_file():
            return str(Path(folder) / JEMALLOC)
    return None


def resolve(mode: str, executor: str = "local") -> str:
    """The allocator `mode` means here: `auto` is jemalloc where the system has it and the workers are
    local processes (Ray starts its own), else retain; any other mode is itself."""
    if mode != "auto":
        return mode
    return "jemalloc" if executor == "local" and jemalloc_library() is not None else "retain"


def environment(mode: str) -> dict[str, str]:
    """The variables a worker process must start with for `mode`: jemalloc preloaded, or nothing."""
    if resolve(mode) != "jemalloc":
        return {}
    library = jemalloc_library()
    if library is None:
        raise ValueError(f"allocator='jemalloc': {JEMALLOC} not found (Debian/Ubuntu: apt install libjemalloc2)")
    preload = " ".join(p for p in (library, os.environ.get("LD_PRELOAD", "")) if p)
    return {"LD_PRELOAD": preload, "MALLOC_CONF": JEMALLOC_CONF}


def check(mode: str, executor: str = "local") -> None:
    """Before any work: jemalloc needs the system's library, and workers this tool starts (UsageError)."""
    from suite.errors import UsageError

    if mode != "jemalloc":  # NB: auto never refuses: it falls back to retain
        return
    if executor == "ray":
        raise UsageError(
            "[settings]: field 'allocator' = 'jemalloc' (allowed with local workers only: "
            "Ray starts its actors' processes itself; retain or default on Ray)"
        )
    try:
        environment(mode)
    except ValueError as err:
        raise UsageError(f"[settings]: field 'allocator' = 'jemalloc' ({err}; or retain, default)") from None


@contextlib.contextmanager
def started_with(mode: str):
    """os.environ as a new worker process of `mode` must inherit it, while it starts."""
    wanted = environment(mode)
    before = {name: os.environ.get(name) for name in wanted}
    os.environ.update(wanted)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _jemalloc_loaded():
    """jemalloc's mallctl where this process runs on jemalloc, else None."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return None
    return getattr(ctypes.CDLL(None), "mallctl", None) if "libjemalloc" in maps else None


def configure(mode: str = "retain") -> dict[str, object]:
    """Apply `mode` to this process and return what was set, for the environment record."""
    if mode not in MODES:
        raise ValueError(f"allocator={mode!r} (allowed: {', '.join(MODES)})")
    mode = resolve(mode)
    if mode != "jemalloc" and _jemalloc_loaded() is not None:
        raise RuntimeError(
            f"allocator={mode!r}, but this process runs on jemalloc (preloaded): its mallopt "
            "would set an allocator nothing uses"
        )
    if mode == "default":
        return {"allocator": "glibc default"}
    if mode == "jemalloc":
        if _jemalloc_loaded() is None:
            raise RuntimeError(
                "allocator='jemalloc', but this process does not run on jemalloc: a worker must "
                "start with it preloaded (suite.machine.allocator.started_with)"
            )
        return {"allocator": "jemalloc", "malloc_conf": os.environ.get("MALLOC_CONF", "")}
    name = ctypes.util.find_library("c")
    if name is None:
        return {"allocator": "default (no C library found to configure)"}
    libc = ctypes.CDLL(name)
    if not hasattr(libc, "mallopt"):
        return {"allocator": f"default ({name} has no mallopt: not glibc)"}
    mmap_threshold = 1 << 30
    ok = libc.mallopt(M_MMAP_THRESHOLD, mmap_threshold) and libc.mallopt(M_TRIM_THRESHOLD, ctypes.c_int(2**31 - 1))
    if not ok:
        return {"allocator": "glibc default (mallopt refused)"}
    return {"allocator": "glibc retain", "mmap_threshold": mmap_threshold, "trim_threshold": 2**31 - 1}


def trim() -> None:
    """Give freed heap memory back to the system (between cases: a retained heap per worker
    process, times several replicate workers, crowded memory and slowed the next case 3-6x)."""
    mallctl = _jemalloc_loaded()
    if mallctl is not None:
        mallctl(PURGE_ALL, None, None, None, ctypes.c_size_t(0))
        return
    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name) if name else None
    if libc is not None and hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)
