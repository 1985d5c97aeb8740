"""Time `native` paths beside dense `sdpa` and compiled `flex` (issue 2's performance figures).

    python benchmarks/native_vs_library.py [--seq-lens 1024,4096,16384] [--threads 2] [--allocator retain]

float32, B=1, H=8, d=64, torch.utils.benchmark (blocked_autorange, median). Compile and mask
construction happen in `prepare`, outside the timed call, and are printed apart. GFLOP/s is the
variant's theory FLOPs (4·B·H·P·d) over the median: a dense mask does n² work for P pairs, so its
figure is "useful" FLOP/s.
"""

from __future__ import annotations

import argparse

import torch
import torch.utils.benchmark as benchmark

import variants
from suite.machine import allocator

CASES = [  # (variant, params, impls)
    ("sliding_window", {"window": 128}, ["native", "flex", "sdpa"]),
    ("linear", {}, ["native"]),
    ("strided", {}, ["native", "flex", "sdpa"]),
    ("full", {}, ["sdpa"]),
]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seq-lens", default="1024,4096,16384")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--min-run-time", type=float, default=2.0)
    parser.add_argument("--variants", default=",".join(c[0] for c in CASES))
    parser.add_argument("--allocator", choices=allocator.MODES, default="retain")
    args = parser.parse_args()
    print(f"allocator: {allocator.configure(args.allocator)}, threads: {args.threads}, torch {torch.__version__}")
    torch.set_num_threads(args.threads)
    seq_lens = [int(x) for x in args.seq_lens.split(",")]
    results, medians = [], {}
    for name, params, impls in CASES:
        if name not in args.variants.split(","):
            continue
        spec = variants.get(name)
        for n in seq_lens:
            q, k, v = (torch.randn(1, 8, n, 64) for _ in range(3))
            for impl in impls:
                prepared = spec.prepare(q, k, v, impl=impl, **params)
                timer = benchmark.Timer(
                    stmt="fn()",
                    globals={"fn": prepared},
                    label=f"{name} {params or ''}",
                    sub_label=impl,
                    description=f"n={n}",
                    num_threads=args.threads,
                )
                m = timer.blocked_autorange(min_run_time=args.min_run_time)
                results.append(m)
                medians[(name, impl, n)] = m.median
                setup = ", ".join(f"{k}={v:.2f}s" for k, v in prepared.setup_s.items())
                gflops = spec.theory(seq_len=n, num_heads=8, head_dim=64, **params).flops / m.median / 1e9
                print(
                    f"{name:>15} {impl:>7} n={n:>6}: median {m.median * 1e3:9.2f} ms "
                    f"(IQR {m.iqr * 1e3:.2f} ms, {len(m.times)} samples, {gflops:6.1f} GFLOP/s) "
                    f"setup: {setup or '-'}",
                    flush=True,
                )
    benchmark.Compare(results).print()
    lo, hi = min(seq_lens), max(seq_lens)
    print(f"\nratios {lo} -> {hi} (n grew {hi // lo}x):")
    for (name, impl, n), t in medians.items():
        if n == hi and (name, impl, lo) in medians:
            print(f"  {name}/{impl}: {t / medians[(name, impl, lo)]:.1f}x")
    if ("sliding_window", "native", hi) in medians:
        nat = medians[("sliding_window", "native", hi)]
        print(
            f"  sliding_window at n={hi}: sdpa/native = {medians[('sliding_window', 'sdpa', hi)] / nat:.1f}x, "
            f"native/flex = {nat / medians[('sliding_window', 'flex', hi)]:.2f}x"
        )


if __name__ == "__main__":
    main()
