"""Tile sizes and launch settings of the kernels, chosen per head size (not autotuned: a tuning
run would take a GPU lease's minutes). The interpreter runs the same tiles as a GPU, so the CPU
checks check the code the GPU times, boundary masks included.

The kernels' pattern parameters (reach, rows, key counts, heads) are `do_not_specialize`: Triton would
compile a kernel again for every value of 1 and every change of divisibility by 16 (minutes of a
lease); n and d stay specialized, their divisibility lets the (B, H, n, d) buffers' accesses vectorize."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from triton import knobs

# Whether this process's kernels were defined under the interpreter (variants.triton.capability):
# @triton.jit decides when a kernel module is imported, and every family imports this module.
INTERPRETED = bool(knobs.runtime.interpret)


@dataclass(frozen=True)
class Tiles:
    bm: int  # query rows of a program (or of a step)
    bn: int  # keys of a step
    bd: int  # head dim, padded to a power of two >= 16 (tl.dot's least)
    warps: int = 4
    stages: int = 2

    @staticmethod
    def head(d: int) -> int:
        return max(16, triton.next_power_of_2(d))

    @classmethod
    def band_fwd(cls, q: torch.Tensor) -> "Tiles":
        bd = cls.head(q.shape[-1])
        return cls(128, 64 if bd <= 64 else 32, bd, warps=8 if bd >= 64 else 4, stages=3)

    @classmethod
    def band_dq(cls, q: torch.Tensor) -> "Tiles":
        bd = cls.head(q.shape[-1])
        return cls(128, 32, bd, warps=8 if bd >= 64 else 4, stages=2)

    @classmethod
    def band_dkdv(cls, q: torch.Tensor) -> "Tiles":
        bd = cls.head(q.shape[-1])
        return cls(32, 128, bd, warps=8 if bd >= 64 else 4, stages=2)

    @classmethod
    def gather(cls, q: torch.Tensor) -> "Tiles":
        """Key lists: bm rows of a program, bn slots (or a key's entries) a step: (bm, bn, bd) gathered."""
        bd = cls.head(q.shape[-1])
        return cls(16, 16 if bd <= 64 else 8, bd, warps=8, stages=1)


def launch_dtypes(q: torch.Tensor):
    """(accumulator dtype, tl.dot's input precision): float64 in float64 (the interpreter), else
    float32; IEEE products for float32 inputs (TF32's 10-bit mantissa misses the float32 checks);
    for bf16/fp16 operands Triton's default, which their products ignore."""
    acc = tl.float64 if q.dtype == torch.float64 else tl.float32
    return acc, precision(q.dtype)


def precision(dtype: torch.dtype) -> str:
    return "ieee" if dtype in (torch.float32, torch.float64) else "tf32"


def accumulator(q: torch.Tensor) -> torch.dtype:
    return torch.float64 if q.dtype == torch.float64 else torch.float32
