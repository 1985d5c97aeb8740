"""Command line: `python -m suite list | run`."""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import sys
import time
from pathlib import Path

import torch

import variants

DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32, "float64": torch.float64}


def availability(spec, impl: str, device: str, dtype: torch.dtype, causal: bool) -> str:
    reasons = spec.reasons(impl, device=device, dtype=dtype, causal=causal)
    return "available" if not reasons else "unavailable: " + "; ".join(reasons)


def claim_of(spec) -> str:
    # the exponents do not depend on the shape; gqa needs some KV heads to state them
    theory = spec.theory(seq_len=4096, num_heads=8, num_kv_heads=2 if spec.kv_heads == "divides" else None)
    claim = f"n^{theory.claimed_exponent_n:g}"
    if theory.claimed_exponent_d is not None and theory.claimed_exponent_d != 1:
        claim += f", d^{theory.claimed_exponent_d:g}"
    return claim


def cmd_list(args: argparse.Namespace) -> int:
    dtype = DTYPES[args.dtype]
    chosen = args.variant or variants.names()
    for name in chosen:
        spec = variants.get(name)
        defaults = ", ".join(f"{p.name}={p.describe_default()}" for p in spec.params) or "no parameters"
        print(f"{spec.name}  [{spec.family}]  claim {claim_of(spec)}  ({defaults})")
        print(f"    {spec.summary}  Source: {spec.source}.")
        for impl in spec.impls.values():
            print(f"    {impl.name:<9} {impl.cost}")
            for device in args.device:
                print(f"    {'':<9} {device}/{args.dtype}: {availability(spec, impl.name, device, dtype, args.causal)}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from suite import grid as grids
    from suite import runner
    from suite.case import Case

    results_dir = Path(args.results_dir)
    try:
        for module in args.plugin:
            importlib.import_module(module)
        if args.resume:
            run_dir = results_dir / args.resume
            plan = runner.load_plan(run_dir)
            for module in plan["plugins"]:
                importlib.import_module(module)
            cases = [Case.from_key(key) for key in plan["cases"]]
            settings, plugins, label = plan["settings"], plan["plugins"], f"{plan['grid']} (resumed)"
        else:
            grid = grids.resolve(args.grid, devices=args.device, only_variants=args.variant)
            if args.threads is not None:
                if args.threads < 1:
                    raise grids.ConfigError(f"--threads {args.threads} (allowed: integers >= 1)")
                grid = dataclasses.replace(grid, settings=dataclasses.replace(grid.settings, threads=args.threads))
            cases, plugins = list(grid.cases), list(args.plugin)
            settings, label = dataclasses.asdict(grid.settings), grid.name
            run_id = args.run_id or f"{time.strftime('%Y%m%d-%H%M%S')}-{grid.name}"
            run_dir = results_dir / run_id
            if run_dir.exists():
                raise grids.ConfigError(f"--run-id {run_id!r}: {run_dir} exists (use --resume {run_id} to finish it)")
    except (grids.ConfigError, FileNotFoundError, ImportError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if args.dry_run:
        for case in cases:
            print(case.label())
        print(f"{len(cases)} cases planned (grid {label}); nothing run, nothing written")
        return 0
    if not args.resume:
        runner.start(grid, run_dir, plugins)
    print(f"run {run_dir.name}: {len(cases)} cases, grid {label}, results in {run_dir}/", file=sys.stderr)
    started = time.perf_counter()
    try:
        counts = runner.run(run_dir=run_dir, cases=cases, settings=settings, plugins=plugins,
                            resume=bool(args.resume))
    except runner.WorkerError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    wall = time.perf_counter() - started
    summary = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    print(f"done in {wall:.1f}s: {summary}")
    print(f"results: {run_dir / 'results.parquet'} and results.csv; environment: {run_dir / 'env.json'}")
    return 0


def csv_list(text: str) -> list[str]:
    return [x for x in text.split(",") if x]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m suite", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("list", help="every variant × implementation, its claim and whether it runs here")
    p.add_argument("--variant", type=csv_list, help="comma-separated variant names (default: all)")
    p.add_argument("--device", type=csv_list, default=["cpu", "cuda"], help="devices to check (default: cpu,cuda)")
    p.add_argument("--dtype", choices=list(DTYPES), default="float32")
    p.add_argument("--causal", action="store_true", help="check the causal form")
    p.set_defaults(func=cmd_list)

    r = sub.add_parser("run", help="sweep a grid: time, FLOPs and peak memory of every case")
    r.add_argument("--grid", default="smoke", help="smoke, quick, full, or a TOML/YAML file (default: smoke)")
    r.add_argument("--device", type=csv_list, help="override the grid's devices: cpu,cuda")
    r.add_argument("--variant", type=csv_list, help="only these variants (comma-separated)")
    r.add_argument("--run-id", help="name of the run folder under --results-dir (default: time and grid)")
    r.add_argument("--resume", metavar="NAME", help="finish run NAME: only the cases its journal lacks")
    r.add_argument("--dry-run", action="store_true", help="list the planned cases and their count")
    r.add_argument("--plugin", action="append", default=[], help="a module that registers extra variants")
    r.add_argument("--threads", type=int, help="override the grid's thread count")
    r.add_argument("--results-dir", default="results")
    r.set_defaults(func=cmd_run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if getattr(args, "variant", None):
            for name in args.variant:
                variants.get(name)
        for device in getattr(args, "device", []) or []:
            if device not in ("cpu", "cuda"):
                raise ValueError(f"--device {device!r} (allowed: cpu, cuda)")
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return args.func(args)
