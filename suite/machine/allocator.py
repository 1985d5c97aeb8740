"""How the measuring process allocates CPU memory: a recorded setting, never a hidden one.

glibc serves every allocation over 128 KiB (its default mmap threshold) with fresh pages and hands
them back on free, so a kernel that makes megabyte-sized temporaries pays page faults on every call:
on this machine a third of a blocked attention's time at n = 16384, and most of a 2 MiB copy. The
`retain` setting keeps freed memory in the heap (mallopt), as jemalloc/tcmalloc do for PyTorch on
CPU, while a case runs; between cases the worker trims the heap (`trim`). It applies to every
implementation alike and is written into each run's environment.
"""

from __future__ import annotations

import ctypes
import ctypes.util

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameter numbers (malloc.h)
M_MMAP_THRESHOLD = -3
MODES = ("retain", "default")


def configure(mode: str = "retain") -> dict[str, object]:
    """Apply `mode` to this process and return what was set, for the environment record."""
    if mode not in MODES:
        raise ValueError(f"allocator={mode!r} (allowed: {', '.join(MODES)})")
    if mode == "default":
        return {"allocator": "glibc default"}
    name = ctypes.util.find_library("c")
    if name is None:
        return {"allocator": "default (no C library found to configure)"}
    libc = ctypes.CDLL(name)
    if not hasattr(libc, "mallopt"):
        return {"allocator": f"default ({name} has no mallopt: not glibc)"}
    mmap_threshold = 1 << 30
    ok = libc.mallopt(M_MMAP_THRESHOLD, mmap_threshold) and libc.mallopt(
        M_TRIM_THRESHOLD, ctypes.c_int(2**31 - 1)
    )
    if not ok:
        return {"allocator": "glibc default (mallopt refused)"}
    return {"allocator": "glibc retain", "mmap_threshold": mmap_threshold, "trim_threshold": 2**31 - 1}


def trim() -> None:
    """Give freed heap memory back to the system (between cases: a retained heap per worker
    process, times several replicate workers, crowded memory and slowed the next case 3-6x)."""
    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name) if name else None
    if libc is not None and hasattr(libc, "malloc_trim"):
        libc.malloc_trim(0)
