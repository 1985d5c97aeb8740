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
    def chunk(cls, d: int, features: int, width: int) -> "Tiles":
        """Linearized chunks: bm rows a chunk, bn columns of C a program (a row's features are one tile)."""
        bf = cls.head(features)
        return cls(
            64 if bf <= 128 else 32,
            min(64, max(16, triton.next_power_of_2(width))),
            cls.head(d),
            warps=8 if bf >= 128 else 4,
        )

    @classmethod
    def gather(cls, q: torch.Tensor) -> "Tiles":
        """Key lists: bm rows of a program, bn slots (or a key's entries) a step: (bm, bn, bd) gathered."""
        bd = cls.head(q.shape[-1])
        return cls(16, 16 if bd <= 64 else 8, bd, warps=8, stages=1)


DEFAULT_STAGES = 3  # Triton's own for CUDA when a launch names none
_FEWER: dict[tuple, int] = {}  # (kernel, its launch's key) -> the stages that fit, where fewer than asked
_SHRUNK: set = set()  # kernels that ever needed fewer: only their launches pay for a key


def launch(kernel, grid, *args, **kwargs) -> None:
    """kernel[grid](*args, **kwargs), with fewer pipeline stages where the device cannot hold the asked
    ones in a block's shared memory (Triton raises OutOfResources when it loads the kernel): the tiles are
    sized for an H100 (227 KiB a block), an A100 has 163 KiB and the sm_86/89 cards 99 KiB
    (variants.triton.compile_check --arch names each launch's need). The stages that fit are remembered
    per launch, so a call after the first pays no failed load."""
    from triton.runtime.errors import OutOfResources

    stages = kwargs.pop("num_stages", DEFAULT_STAGES)
    key = None
    if _SHRUNK and kernel in _SHRUNK:  # NB: a JITFunction hashes its cache key: not for every launch
        key = _launch_key(kernel, args, kwargs, stages)
        stages = _FEWER.get(key, stages)
    while True:
        try:
            kernel[grid](*args, num_stages=stages, **kwargs)
            return
        except OutOfResources:
            if stages <= 1:
                raise
            _SHRUNK.add(kernel)
            key = key or _launch_key(kernel, args, kwargs, stages)
            stages -= 1
            _FEWER[key] = stages


def _launch_key(kernel, args, kwargs, stages: int) -> tuple:
    """What decides a launch's shared memory: its tensors' dtypes, its constexprs and warps, the stages asked."""
    dtypes = tuple(a.dtype for a in args if isinstance(a, torch.Tensor))
    return kernel, dtypes, tuple(sorted((k, str(v)) for k, v in kwargs.items())), stages


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
