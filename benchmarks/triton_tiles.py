"""The triton paths' tiles on a GPU: candidates for the band backward and the linearized chunks timed there.

    python benchmarks/triton_tiles.py OUT.json [--n 16384,65536] [--families band,chunk] [--rep 50]
    python benchmarks/triton_tiles.py OUT.json --device cpu --n 256 --rep 1   # tried here, interpreted

The tiles are fixed per head size (variants/triton/tiles.py), chosen before any GPU timed them. On one H100
the band's backward took 0.62 ms against FlexAttention's 0.46 at n = 16384 (its forward is even), and causal
`linear`'s forward+backward 17.5 ms against flash-linear-attention's 7.9 at 65536, its causal state walk
one program per head and tile of columns (16 to 32 programs on 132 SMs). Each candidate is timed with
do_bench (bf16, B = 1, H = 16, d = 64) and its gradients held against the default tiles' (bf16: within 2e-2
of the largest entry; the default's are the ones the profile checks against dense float64):

- `band`: `band_dq` and `band_dkdv` (block rows, block keys, warps, stages), one at a time, the other on
  its default, over sliding_window's backward (`band_bwd`);
- `chunk`: `Tiles.chunk` (rows a chunk, columns of C a program, warps) over causal `linear`'s
  forward+backward.

Prints the candidates and the fastest of each kernel beside its default; writes every figure as JSON. A
candidate the device cannot hold is a row with its error.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
from dataclasses import replace
from pathlib import Path

import torch

import variants
from suite.store import atomic

# per Tiles method: its candidates (bm, bn, warps, stages)
CANDIDATES = {
    "band_dq": list(itertools.product([(128, 32), (128, 64), (64, 64), (64, 32), (128, 16)], (4, 8), (2, 3))),
    "band_dkdv": list(itertools.product([(32, 128), (64, 128), (64, 64), (32, 64), (16, 128)], (4, 8), (2, 3))),
    "chunk": list(itertools.product([(64, 64), (64, 32), (64, 16), (32, 64), (32, 32), (32, 16)], (2, 4, 8), (2,))),
}
FAMILIES = {"band": ("band_dq", "band_dkdv"), "chunk": ("chunk",)}


def band_problem(n: int, device: str, dtype):
    """sliding_window's backward at n (its lone band part), gradients written: the call timed."""
    from variants.triton import paths
    from variants.triton.backward import row_delta
    from variants.triton.band import KINDS, band_bwd
    from variants.triton.union import forward

    q, k, v, do = tensors(n, device, dtype)
    spec = variants.get("sliding_window")
    (part,) = paths.sliding_window(n, False, spec.resolve(n, {}), q)
    out, lse = forward(q, k, v, (part,), False)
    delta = row_delta(out.contiguous(), do)

    def run():
        grads = [torch.empty_like(q) for _ in range(3)]
        band_bwd(q, k, v, do, lse, delta, *grads, kind=KINDS[part.kind], p1=part.p1, causal=False, add=False)
        return grads

    return run


def chunk_problem(n: int, device: str, dtype):
    """causal linear's forward and backward at n: the call timed, its gradients."""
    q, k, v, do = tensors(n, device, dtype)
    q, k, v = (x.requires_grad_() for x in (q, k, v))
    spec = variants.get("linear")

    def run():
        q.grad = k.grad = v.grad = None
        spec.attention(q, k, v, impl="triton", causal=True).backward(do)
        return [q.grad, k.grad, v.grad]

    return run


PROBLEMS = {"band": band_problem, "chunk": chunk_problem}


def tensors(n: int, device: str, dtype):
    gen = torch.Generator().manual_seed(0)
    return [torch.randn(1, 16, n, 64, generator=gen).to(device, dtype) for _ in range(4)]


@contextlib.contextmanager
def tiles_set(name: str, bm: int, bn: int, warps: int, stages: int):
    """Tiles.<name> returning its default for each call's shape with (bm, bn, warps, stages) in place."""
    from variants.triton.tiles import Tiles

    original = getattr(Tiles, name)
    setattr(Tiles, name, classmethod(lambda cls, *a: replace(original(*a), bm=bm, bn=bn, warps=warps, stages=stages)))
    try:
        yield
    finally:
        setattr(Tiles, name, original)


def timed(run, device: str, rep: int) -> float:
    if device != "cuda":
        import time

        began = time.perf_counter()
        run()
        return 1e3 * (time.perf_counter() - began)
    from triton.testing import do_bench

    return do_bench(run, warmup=10, rep=rep, return_mode="median")


def default_of(name: str):
    from variants.triton.tiles import Tiles

    like = torch.empty(1, 16, 8, 64)
    tiles = Tiles.chunk(64, 64, 64) if name == "chunk" else getattr(Tiles, name)(like)
    return tiles.bm, tiles.bn, tiles.warps, tiles.stages


def sweep(family: str, n: int, device: str, rep: int) -> list[dict]:
    run = PROBLEMS[family](n, device, torch.bfloat16 if device == "cuda" else torch.float32)
    reference = [g.clone() for g in run()]
    scale = max(float(g.abs().max()) for g in reference) or 1.0
    rows = []
    for name in FAMILIES[family]:
        default = default_of(name)
        for (bm, bn), warps, stages in CANDIDATES[name]:
            row = {
                "family": family,
                "n": n,
                "kernel": name,
                "bm": bm,
                "bn": bn,
                "warps": warps,
                "stages": stages,
                "default": (bm, bn, warps, stages) == default,
            }
            try:
                with tiles_set(name, bm, bn, warps, stages):
                    grads = run()
                    row["error"] = max(float((a - b).abs().max()) for a, b in zip(grads, reference)) / scale
                    row["ms"] = timed(run, device, rep)
            except Exception as err:  # noqa: BLE001 - a candidate the device refuses is a row with the reason
                row["failed"] = f"{type(err).__name__}: {str(err)[:160]}"
            rows.append(row)
            print(
                f"{family} n={n} {name:9s} bm={bm:<4d} bn={bn:<4d} warps={warps} stages={stages} "
                f"{row.get('ms', float('nan')):8.3f} ms  err {row.get('error', float('nan')):.1e}"
                f"{'  (default)' if row['default'] else ''}  {row.get('failed', '')}",
                flush=True,
            )
    return rows


def best(rows: list[dict], tol: float) -> dict:
    """The fastest candidate of each kernel within `tol` of the default's gradients."""
    good = [r for r in rows if "ms" in r and r["error"] <= tol]
    names = dict.fromkeys(r["kernel"] for r in rows)
    return {name: min((r for r in good if r["kernel"] == name), key=lambda r: r["ms"], default=None) for name in names}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--n", default="16384,65536")
    parser.add_argument("--families", default="band,chunk", help=f"comma-separated, of {', '.join(FAMILIES)}")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--rep", type=int, default=50, help="do_bench's timed milliseconds")
    args = parser.parse_args()
    tol = 2e-2 if args.device == "cuda" else 1e-5
    rows = []
    for family, n in itertools.product(args.families.split(","), (int(x) for x in args.n.split(","))):
        found = sweep(family, n, args.device, args.rep)
        rows += found
        atomic.write_text(Path(args.out), json.dumps(rows, indent=1))  # whole, after every length
        default = {r["kernel"]: r["ms"] for r in found if r["default"] and "ms" in r}
        for name, row in best(found, tol).items():
            if row:
                print(
                    f"best {name} n={n}: bm={row['bm']} bn={row['bn']} warps={row['warps']} stages={row['stages']} "
                    f"{row['ms']:.3f} ms (default {default.get(name, float('nan')):.3f})"
                )


if __name__ == "__main__":
    main()
