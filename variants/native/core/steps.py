"""How many elements a native path's step may hold on a device: cache-sized on the CPU, launch-sized elsewhere.

On the CPU a step is sized so its scores stay in cache (the paths' `cpu` budgets, each measured
where it is set): a step costs a few microseconds to start and a cache miss costs more. On a GPU a
step is a handful of kernel launches of several µs each, and a step of a few hundred rows is far
below what fills the device. There a step takes as much as the memory rule allows: `step_elements`,
half an output, with as many heads in it as fit.

Cache-sized steps on a GPU launch many times the kernels, and spend most of a call launching them
(docs/performance.md, "GPU sessions").
"""

from __future__ import annotations

import torch


def step_elements(x: torch.Tensor) -> int:
    """Elements one step of a native call on x (B, H, n, d) may hold: half the output.

    With the output itself and the small per-row tensors of a fold, a call's peak stays within
    2 outputs at every n (at n = 256 a block of 128 rows × 384 keys over 8 heads is 3 outputs).
    NB: a loop drops its step's tensors (`del`) before the next step makes its own: a name still
    bound to the last step's scores or output kept two steps alive at once (up to one output more)."""
    return max(1, x.numel() // 2)


CACHE_SIZED = {"cpu"}  # devices whose steps are sized to their caches


def cache_sized(x: torch.Tensor) -> bool:
    """Whether x's device takes cache-sized steps (the CPU)."""
    return x.device.type in CACHE_SIZED


def cache_elements(x: torch.Tensor, cpu: int) -> int:
    """Elements a step's scores may hold on x's device: `cpu` on the CPU, `step_elements(x)` elsewhere."""
    return cpu if cache_sized(x) else step_elements(x)


def cache_rows(x: torch.Tensor, cpu: int) -> int:
    """Rows of a step that counts its size in rows: `cpu` on the CPU, unbounded (the memory rule bounds it)
    elsewhere."""
    return cpu if cache_sized(x) else 1 << 62
