"""Where random/native's time per row goes as n grows, beside this host's cost of a random row gather
against the size of the table it gathers from (docs/performance.md, (14); issue 45: the verdict that
reads the climb as a higher term).

    python benchmarks/gather_curve.py [--rounds 5]

One thread, float32, d = 64. The gather: `index_select` of 2^18 random 256-byte rows from a table of
64 KiB to 512 MiB (ns a row, the best of the rounds). random/native (H = 8, r = 32 keys and its own):
its whole forward, the sampled scores (SDDMM, by its key slices where it chose them), the product by
the pattern (SpMM, an embedding bag) and the softmax over each row's keys, each in µs a row of all
heads, the best of the rounds. Nothing is stored; the figures are printed.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

D = 64


def best(fn, rounds: int) -> float:
    out = float("inf")
    for _ in range(rounds):
        begin = time.perf_counter()
        fn()
        out = min(out, time.perf_counter() - begin)
    return out


def gather_curve(rounds: int) -> None:
    picks = 1 << 18
    print("table      ns a row (index_select of 256-byte rows)")
    for log2 in range(16, 30):
        rows = (1 << log2) // (D * 4)
        table = torch.randn(rows, D)
        idx = torch.randint(0, rows, (picks,))
        out = torch.empty(picks, D)
        t = best(lambda: torch.index_select(table, 0, idx, out=out), rounds)
        print(f"{(1 << log2) / 2**20:9.3f} MiB {t / picks * 1e9:7.1f}")


def random_rows(rounds: int) -> None:
    from variants.catalog.random_keys import plan
    from variants.native.keys.csr_slices import csr_matmul, sampled_scores
    from variants.native.keys.rows import sparse_part

    heads = 8
    print("n        µs a row (8 heads): forward, SDDMM, SpMM, softmax; key slices")
    for n in (2048, 8192, 32768, 65536):
        q, k, v = (torch.randn(1, heads, n, D) for _ in range(3))
        keys = plan(n, False, {"keys": 32, "seed": 0}, q)
        crow, col = keys.pattern.crow_indices(), keys.pattern.col_indices()
        q3, k3, v3 = (x.reshape(heads, n, D) for x in (q, k, v))
        w = keys.idx.shape[1]
        p = torch.rand(heads, n * w)
        scores = torch.randn(n, w)
        whole = best(lambda: sparse_part(q, k, v, rows=keys, need_lse=False), rounds)
        sddmm = best(lambda: [sampled_scores(keys.slices, q3[i], k3[i], D**-0.5) for i in range(heads)], rounds)
        spmm = best(lambda: [csr_matmul(crow, col, p[i], v3[i]) for i in range(heads)], rounds)
        soft = best(lambda: [torch.softmax(scores, -1) for _ in range(heads)], rounds)
        print(
            f"{n:6d} {whole / n * 1e6:8.2f} {sddmm / n * 1e6:6.2f} {spmm / n * 1e6:6.2f} {soft / n * 1e6:6.2f}"
            f"   {len(keys.slices)}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    gather_curve(args.rounds)
    random_rows(args.rounds)


if __name__ == "__main__":
    main()
