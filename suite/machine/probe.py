"""The device's matmul rate: the yardstick of the report's efficiency, measured in a worker like the cases'.

A probe is only as good as its spread. Each shape of the device's entry (square GEMMs and the
batched shapes attention runs: scores q·kᵀ with inner dimension d, values p·v with output width d)
is timed in every one of ROUNDS rounds, the shapes interleaved, so a busy spell of the machine
lands on all of them rather than on one. The peak is the best shape's median over the rounds, and
its spread across the rounds is reported beside it.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import torch

ROUNDS = 3


@dataclass(frozen=True)
class GemmShape:
    """A batched matmul (batch, m, k) @ (batch, k, n): what it stands for and its work."""

    what: str  # "square", "scores q·kᵀ", "values p·v"
    batch: int
    m: int
    k: int
    n: int

    @property
    def flops(self) -> int:
        return 2 * self.batch * self.m * self.k * self.n

    @property
    def name(self) -> str:
        return f"{self.batch}×{self.m}×{self.k}×{self.n}"

    def operands(self, device: str, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        gen = torch.Generator(device="cpu").manual_seed(0)
        a = torch.randn(self.batch, self.m, self.k, generator=gen)
        b = torch.randn(self.batch, self.k, self.n, generator=gen)
        return a.to(device=device, dtype=dtype), b.to(device=device, dtype=dtype)


def attention_shapes(heads: int, rows: int, d: int, keys: int) -> tuple[GemmShape, GemmShape]:
    """The two matmuls of one attention block: scores (rows × d)·(d × keys), values (rows × keys)·(keys × d)."""
    return GemmShape("scores q·kᵀ", heads, rows, d, keys), GemmShape("values p·v", heads, rows, keys, d)


def square(size: int) -> GemmShape:
    return GemmShape("square", 1, size, size, size)


def measure(timer, shapes: tuple[GemmShape, ...], device: str, dtype: torch.dtype, threads: int,
            min_run_time: float, min_samples: int) -> dict:
    """Rates of every shape over ROUNDS interleaved rounds; the peak is the best shape's median."""
    operands = {shape: shape.operands(device, dtype) for shape in shapes}
    rounds: dict[GemmShape, list[float]] = {shape: [] for shape in shapes}
    for _ in range(ROUNDS):
        for shape, (a, b) in operands.items():
            samples = timer(lambda: torch.bmm(a, b), min_run_time, 50, min_samples, threads)
            rounds[shape].append(shape.flops / statistics.median(samples))
    by_shape = {shape.name: _summary(shape, rates) for shape, rates in rounds.items()}
    best = max(by_shape, key=lambda name: by_shape[name]["flops_per_s"])
    return {"flops_per_s": by_shape[best]["flops_per_s"], "spread": by_shape[best]["spread"], "shape": best,
            "by_shape": by_shape, "rounds": ROUNDS, "threads": threads,
            "note": f"best shape's median FLOP/s over {ROUNDS} interleaved rounds of batched torch.bmm"}


def _summary(shape: GemmShape, rates: list[float]) -> dict:
    mid = statistics.median(rates)
    return {"what": shape.what, "flops_per_s": mid, "rounds": rates, "spread": (max(rates) - min(rates)) / mid}
