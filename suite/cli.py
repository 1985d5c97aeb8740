"""Command line: `python -m suite list` (more commands come with the runner)."""

from __future__ import annotations

import argparse
import sys

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
