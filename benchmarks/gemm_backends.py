"""The GEMM rate of each float32 matmul kernel torch has on this CPU, beside the one the probe times.

The suite's matmul probe (suite/machine/probe.py) times batched `torch.bmm`, which on an x86 CPU is MKL's
sgemm. On an AMD host MKL may take a narrower code path than the CPU has, while oneDNN (torch's
`mkldnn` backend, which its convolutions use) takes the widest: the roofline's compute ceiling is then
the library's, not the machine's. This script times the same products through each kernel, one thread,
interleaved rounds, each checked against the float64 product first:

    python benchmarks/gemm_backends.py [--sizes 256,512,1024] [--rounds 3] [--threads 1]

Prints one row per (shape, kernel): the median GFLOP/s over the rounds and the rounds' spread.
"""

from __future__ import annotations

import argparse
import statistics

import torch
from torch.utils.benchmark import Timer


def kernels(a: torch.Tensor, b: torch.Tensor) -> dict:
    """name -> zero-argument call computing a @ b (m × k)·(k × n), each through its own kernel."""
    bt = b.t().contiguous()
    am, bm = a.to_mkldnn(), bt.to_mkldnn()  # oneDNN's blocked layouts, made once (as a model's weights are)
    return {
        "torch.mm (MKL sgemm)": lambda: torch.mm(a, b),
        "oneDNN linear (mkldnn)": lambda: torch._C._nn.mkldnn_linear(am, bm, None),
        "oneDNN on dense tensors (_linear_pointwise)": lambda: torch.ops.mkldnn._linear_pointwise(
            a, bt, None, "none", [], ""
        ),
    }


def dense(x: torch.Tensor) -> torch.Tensor:
    return x.to_dense() if x.is_mkldnn else x


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="256,512,1024")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--min-run-time", type=float, default=0.5)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(
        f"torch {torch.__version__}, {args.threads} thread(s), CPU capability {torch.backends.cpu.get_cpu_capability()}"
    )
    print("| m = k = n | kernel | GFLOP/s (median) | rounds' spread |\n|---|---|---|---|")
    for size in (int(s) for s in args.sizes.split(",")):
        gen = torch.Generator().manual_seed(0)
        a, b = torch.randn(size, size, generator=gen), torch.randn(size, size, generator=gen)
        exact = a.double() @ b.double()
        calls = kernels(a, b)
        for name, call in calls.items():
            err = (dense(call()).double() - exact).abs().max().item() / exact.abs().max().item()
            assert err < 1e-5, f"{name} at {size}: relative error {err:.2e}"
        rates: dict[str, list[float]] = {name: [] for name in calls}
        for _ in range(args.rounds):
            for name, call in calls.items():
                t = Timer("call()", globals={"call": call}).blocked_autorange(min_run_time=args.min_run_time).median
                rates[name].append(2 * size**3 / t / 1e9)
        for name, r in rates.items():
            mid = statistics.median(r)
            print(f"| {size} | {name} | {mid:.1f} | {(max(r) - min(r)) / mid:.1%} |")


if __name__ == "__main__":
    main()
