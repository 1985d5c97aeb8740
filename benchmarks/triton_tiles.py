"""The band backward's tiles on a GPU: candidates for `band_dq_kernel` and `band_dkdv_kernel` timed there.

    python benchmarks/triton_tiles.py OUT.json [--n 16384,65536] [--variant sliding_window] [--rep 50]
    python benchmarks/triton_tiles.py OUT.json --device cpu --n 256 --rep 1   # tried here, interpreted

The tiles are fixed per head size (variants/triton/tiles.py), chosen before any GPU timed them; on one H100
the band's backward took 0.62 ms against FlexAttention's 0.46 at n = 16384 (its forward is even). Each
candidate of one kernel (block rows, block keys, warps, stages), the other kernel on its default, is timed
over the variant's backward (`band_bwd`, do_bench medians, bf16, B = 1, H = 16, d = 64) and its
gradients held against the default tiles' (bf16: within 2e-2 of the largest entry; the default's are the
ones the profile checks against dense float64). Prints each kernel's candidates, fastest first, and the
best pair timed together; writes every figure as JSON. A candidate the device cannot hold is a row with
its error.
"""

from __future__ import annotations

import argparse
import itertools
import json
from dataclasses import replace
from pathlib import Path

import torch

import variants
from suite.store import atomic

BLOCKS = {"band_dq": [(128, 32), (128, 64), (64, 64), (64, 32), (128, 16)],  # (query rows, keys a step)
          "band_dkdv": [(32, 128), (64, 128), (64, 64), (32, 64), (16, 128)]}  # (query rows a step, keys)
WARPS, STAGES = (4, 8), (2, 3)


def problem(variant: str, n: int, device: str):
    """(inputs, the part, lse, dout, delta) of the variant's lone band part at n: bf16 on a GPU."""
    from variants.triton import paths
    from variants.triton.backward import row_delta
    from variants.triton.union import forward

    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    gen = torch.Generator().manual_seed(0)
    q, k, v, do = (torch.randn(1, 16, n, 64, generator=gen).to(device, dtype) for _ in range(4))
    spec = variants.get(variant)
    (part,) = getattr(paths, variant)(n, False, spec.resolve(n, {}), q)
    out, lse = forward(q, k, v, (part,), False)
    return q, k, v, part, lse, do, row_delta(out.contiguous(), do)


def backward(args, tiles: dict):
    """The band backward's gradients with `tiles` in place of the defaults (kernel name -> Tiles)."""
    from variants.triton import tiles as tiling
    from variants.triton.band import KINDS, band_bwd

    q, k, v, part, lse, do, delta = args
    saved = {name: getattr(tiling.Tiles, name) for name in tiles}
    try:
        for name, chosen in tiles.items():
            setattr(tiling.Tiles, name, classmethod(lambda cls, q, chosen=chosen: chosen))
        grads = [torch.empty_like(q) for _ in range(3)]
        band_bwd(q, k, v, do, lse, delta, *grads, kind=KINDS[part.kind], p1=part.p1, p2=part.p2, causal=False,
                 add=False)
        return grads
    finally:
        for name, method in saved.items():
            setattr(tiling.Tiles, name, method)


def timed(args, tiles: dict, device: str, rep: int) -> float:
    if device != "cuda":
        import time

        began = time.perf_counter()
        backward(args, tiles)
        return 1e3 * (time.perf_counter() - began)
    from triton.testing import do_bench

    return do_bench(lambda: backward(args, tiles), warmup=10, rep=rep, return_mode="median")


def sweep(variant: str, n: int, device: str, rep: int) -> list[dict]:
    from variants.triton.tiles import Tiles

    args = problem(variant, n, device)
    defaults = {name: getattr(Tiles, name)(args[0]) for name in BLOCKS}
    reference = backward(args, {})
    scale = max(float(g.abs().max()) for g in reference) or 1.0
    rows = []
    for name, blocks in BLOCKS.items():
        for (bm, bn), warps, stages in itertools.product(blocks, WARPS, STAGES):
            chosen = replace(defaults[name], bm=bm, bn=bn, warps=warps, stages=stages)
            row = {"variant": variant, "n": n, "kernel": name, "bm": bm, "bn": bn, "warps": warps, "stages": stages,
                   "default": chosen == defaults[name]}
            try:
                grads = backward(args, {name: chosen})
                row["error"] = max(float((a - b).abs().max()) for a, b in zip(grads, reference)) / scale
                row["ms"] = timed(args, {name: chosen}, device, rep)
            except Exception as err:  # noqa: BLE001 - a candidate the device refuses is a row with the reason
                row["failed"] = f"{type(err).__name__}: {str(err)[:160]}"
            rows.append(row)
            print(f"{variant} n={n} {name:9s} bm={bm:<4d} bn={bn:<4d} warps={warps} stages={stages} "
                  f"{row.get('ms', float('nan')):8.3f} ms  err {row.get('error', float('nan')):.1e}"
                  f"{'  (default)' if row['default'] else ''}  {row.get('failed', '')}", flush=True)
    return rows


def best(rows: list[dict], tol: float) -> dict:
    """The fastest candidate of each kernel within `tol` of the default's gradients."""
    good = [r for r in rows if "ms" in r and r["error"] <= tol]
    return {name: min((r for r in good if r["kernel"] == name), key=lambda r: r["ms"], default=None) for name in BLOCKS}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--n", default="16384,65536")
    parser.add_argument("--variant", default="sliding_window", choices=("sliding_window", "neighborhood"))
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--rep", type=int, default=50, help="do_bench's timed milliseconds")
    args = parser.parse_args()
    tol = 2e-2 if args.device == "cuda" else 1e-5
    rows = []
    for n in (int(x) for x in args.n.split(",")):
        found = sweep(args.variant, n, args.device, args.rep)
        rows += found
        atomic.write_text(Path(args.out), json.dumps(rows, indent=1))  # whole, after every length
        default = {r["kernel"]: r["ms"] for r in found if r["default"] and "ms" in r}
        for name, row in best(found, tol).items():
            if row:
                print(f"best {name} n={n}: bm={row['bm']} bn={row['bn']} warps={row['warps']} stages={row['stages']} "
                      f"{row['ms']:.3f} ms (default {default.get(name, float('nan')):.3f})")


if __name__ == "__main__":
    main()
