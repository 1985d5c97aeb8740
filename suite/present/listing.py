"""`suite list`: every variant × implementation, its claim, its cost and traits, and whether it runs here."""

from __future__ import annotations

import torch

import variants


def claim_of(spec) -> str:
    # the exponents do not depend on the shape; gqa needs some KV heads to state them
    theory = spec.theory(seq_len=4096, num_heads=8, num_kv_heads=2 if spec.kv_heads == "divides" else None)
    claim = f"n^{theory.claimed_exponent_n:g}"
    if theory.claimed_exponent_d is not None and theory.claimed_exponent_d != 1:
        claim += f", d^{theory.claimed_exponent_d:g}"
    return claim


def shapes(spec) -> str:
    """Which of the shapes beyond self-attention the variant takes (docs/CLAIMS.md), each yes or why not."""
    out = []
    for what, ok, why in (
        ("cross attention", spec.cross, spec.cross_note),
        ("padding", spec.padding, spec.padding_note),
        ("decode", spec.decode, "no decode step here"),
    ):
        out.append(f"{what}: " + ("yes" if ok else f"no ({why})"))
    return "; ".join(out)


def availability(spec, impl: str, device: str, dtype: torch.dtype, causal: bool) -> str:
    reasons = spec.reasons(impl, device=device, dtype=dtype, causal=causal)
    return "available" if not reasons else "unavailable: " + "; ".join(reasons)


def lines(names: list[str], devices: list[str], dtype_name: str, dtype: torch.dtype, causal: bool):
    for name in names:
        spec = variants.get(name)
        defaults = ", ".join(f"{p.name}={p.describe_default()}" for p in spec.params) or "no parameters"
        yield f"{spec.name}  [{spec.family}]  claim {claim_of(spec)}  ({defaults})"
        yield f"    {spec.summary}  Source: {spec.source}."
        yield f"    {shapes(spec)}"
        for impl in spec.impls.values():
            library = f"; calls {impl.library}" if impl.library else ""
            yield f"    {impl.name:<9} {impl.cost}  [work: {impl.work}{library}]"
            if impl.differs is not None:
                yield f"    {'':<9} differs from the definition: {impl.differs.note}"
            for device in devices:
                yield f"    {'':<9} {device}/{dtype_name}: {availability(spec, impl.name, device, dtype, causal)}"
