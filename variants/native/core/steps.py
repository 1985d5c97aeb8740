"""How many elements a native path's step may hold on a device: cache-sized on the CPU, launch-sized elsewhere.

On the CPU a step is sized so its scores stay in cache (the paths' `cpu` budgets, each measured
where it is set): a step costs a few microseconds to start and a cache miss costs more. On a GPU a
step is a handful of kernel launches of several µs each, and a step of a few hundred rows is far
below what fills the device. There a step takes as much as the memory rule allows: `step_elements`,
half an output, with as many heads in it as fit.

Measured on an H200 (bf16, B = 1, H = 16, d = 64, n = 16384, benchmarks/gpu_profile.py; the files
in benchmarks/gpu_profile/h200-2026-11-26): strided's forward launched 11138 kernels in 144-150 ms
a call, 20 ms of them busy; launch-sized, 1268 kernels in 19-20 ms, 4 ms busy. linear's forward
41-44 ms -> 2.3-2.4.
"""

from __future__ import annotations

import torch


def step_elements(x: torch.Tensor) -> int:
    """Elements one step of a native call on x (B, H, n, d) may hold: half the output.

    With the output itself and the small per-row tensors of a fold, a call's peak stays within
    2 outputs at every n (at n = 256 a block of 128 rows × 384 keys over 8 heads is 3 outputs).
    NB: a loop drops its step's tensors (`del`) before the next step makes its own: a name still
    bound to the last step's scores or output kept two steps alive at once (measured: up to 1 output)."""
    return max(1, x.numel() // 2)


CACHE_SIZED = {"cpu"}  # devices whose steps are sized to their caches


def cache_sized(x: torch.Tensor) -> bool:
    """Whether x's device takes cache-sized steps (the CPU)."""
    return x.device.type in CACHE_SIZED


def cache_elements(x: torch.Tensor, cpu: int) -> int:
    """Elements a step's scores may hold on x's device: `cpu` on the CPU, `step_elements(x)` elsewhere."""
    return cpu if cache_sized(x) else step_elements(x)


def cache_rows(x: torch.Tensor, cpu: int) -> int:
    """Rows of a step that counts its size in rows: `cpu` on the CPU, unbounded (the memory rule bounds it) elsewhere."""
    return cpu if cache_sized(x) else 1 << 62
