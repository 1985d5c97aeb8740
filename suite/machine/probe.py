"""The device's matmul rate: the yardstick of the report's efficiency, measured in a worker like the cases'.

A probe is only as good as its spread. Each shape of the device's entry (square GEMMs and the
batched shapes attention runs: scores q·kᵀ with inner dimension d, values p·v with output width d)
is timed in every one of ROUNDS rounds, the shapes interleaved, so a busy spell of the machine
lands on all of them rather than on one. The peak is the best shape's median over the rounds, and
its spread across the rounds is reported beside it.

A shape goes through a kernel: batched `torch.bmm` (MKL's sgemm on an x86 CPU, cuBLAS on CUDA), or,
on the CPU, oneDNN's matmul (`onednn`, torch's `mkldnn` backend, which its convolutions use). MKL may
take a narrower code path than the CPU has, at half oneDNN's rate (docs/performance.md, "(17) The matmul
probe measured one library, not the machine"). The ceiling is
the machine's best, so every kernel the device has is timed, each checked once against the first.
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
    kernel: str = "bmm"  # a key of KERNELS

    @property
    def flops(self) -> int:
        return 2 * self.batch * self.m * self.k * self.n

    @property
    def name(self) -> str:
        return f"{self.batch}×{self.m}×{self.k}×{self.n}" + ("" if self.kernel == "bmm" else f" {self.kernel}")

    def operands(self, device: str, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        gen = torch.Generator(device="cpu").manual_seed(0)
        a = torch.randn(self.batch, self.m, self.k, generator=gen)
        b = torch.randn(self.batch, self.k, self.n, generator=gen)
        return a.to(device=device, dtype=dtype), b.to(device=device, dtype=dtype)


def attention_shapes(heads: int, rows: int, d: int, keys: int) -> tuple[GemmShape, GemmShape]:
    """The two matmuls of one attention block: scores (rows × d)·(d × keys), values (rows × keys)·(keys × d)."""
    return GemmShape("scores q·kᵀ", heads, rows, d, keys), GemmShape("values p·v", heads, rows, keys, d)


def square(size: int, kernel: str = "bmm") -> GemmShape:
    return GemmShape("square", 1, size, size, size, kernel)


def _onednn(a: torch.Tensor, b: torch.Tensor):
    """oneDNN's matmul of one pair, (m × k)·(k × n), its operands in oneDNN's layout once (as a layer's
    weights are): None where torch has no oneDNN for them (another device, dtype or batch)."""
    linear = getattr(torch._C._nn, "mkldnn_linear", None)
    if (
        linear is None
        or not torch.backends.mkldnn.is_available()
        or a.device.type != "cpu"
        or a.shape[0] != 1
        or a.dtype not in (torch.float32, torch.bfloat16)
    ):
        return None
    am, bm = a[0].to_mkldnn(), b[0].t().contiguous().to_mkldnn()
    return lambda: linear(am, bm, None)


KERNELS = {  # name -> (a, b) -> a zero-argument call of a·b, or None where the kernel cannot run it
    "bmm": lambda a, b: lambda: torch.bmm(a, b),
    "onednn": _onednn,
}


def measure(
    timer,
    shapes: tuple[GemmShape, ...],
    device: str,
    dtype: torch.dtype,
    threads: int,
    min_run_time: float,
    min_samples: int,
) -> dict:
    """Rates of every shape its kernel runs over ROUNDS interleaved rounds; the peak is the best shape's median."""
    calls = {shape: _call(shape, *shape.operands(device, dtype)) for shape in shapes}
    calls = {shape: call for shape, call in calls.items() if call is not None}
    rounds: dict[GemmShape, list[float]] = {shape: [] for shape in calls}
    for _ in range(ROUNDS):
        for shape, call in calls.items():
            samples = timer(call, min_run_time, 50, min_samples, threads)
            rounds[shape].append(shape.flops / statistics.median(samples))
    by_shape = {shape.name: _summary(shape, rates) for shape, rates in rounds.items()}
    best = max(by_shape, key=lambda name: by_shape[name]["flops_per_s"])
    kernels = ", ".join(dict.fromkeys(_NAMES[shape.kernel] for shape in calls))
    return {
        "flops_per_s": by_shape[best]["flops_per_s"],
        "spread": by_shape[best]["spread"],
        "shape": best,
        "by_shape": by_shape,
        "rounds": ROUNDS,
        "threads": threads,
        "note": f"best shape's median FLOP/s over {ROUNDS} interleaved rounds of {kernels}",
    }


_NAMES = {"bmm": "batched torch.bmm", "onednn": "oneDNN's matmul"}


def _call(shape: GemmShape, a: torch.Tensor, b: torch.Tensor):
    """The shape's call through its kernel, checked once against torch.bmm's product (a kernel that
    computed something else would be timed for nothing); None where the kernel cannot run it."""
    call = KERNELS[shape.kernel](a, b)
    if call is None or shape.kernel == "bmm":
        return call
    got, want = call(), torch.bmm(a, b)[0]
    got = (got.to_dense() if got.is_mkldnn else got).float()
    err = (got - want.float()).abs().max() / want.float().abs().max().clamp(min=1e-30)
    if not err <= (1e-2 if a.dtype == torch.bfloat16 else 1e-4):
        raise RuntimeError(
            f"the matmul probe's {shape.kernel} kernel is off by {float(err):.2e} of bmm's at {shape.name}"
        )
    return call


def _summary(shape: GemmShape, rates: list[float]) -> dict:
    mid = statistics.median(rates)
    return {"what": shape.what, "flops_per_s": mid, "rounds": rates, "spread": (max(rates) - min(rates)) / mid}
